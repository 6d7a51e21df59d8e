// Data-parallel training over c10d Gloo on 127.0.0.1 (engine/training/distributed.h, `mnemo train --nproc`), and sweeps
// sharded over machines (`mnemo sweep --shard i/N`, `mnemo db merge`).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "engine/io/checkpoint.h"
#include "engine/training/distributed.h"
#include "engine/tools/sweep.h"
#include "results/db.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Runs a shell script; its stdout + stderr.
std::string shell(const fs::path& dir, const std::string& script) {
  write_text(dir / "script.sh", script + "\n");
  FILE* p = popen(("bash " + (dir / "script.sh").string() + " 2>&1").c_str(), "r");
  std::string text;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  pclose(p);
  return text;
}

// A port nothing listens on (bound and released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A small MQAR run in fp64 (gated DeltaNet: chunked kernel, short convolution, gates; no auxiliary loss).
const char* kTinyRun =
    R"({"model": "gated_deltanet", "task": "mqar", "vocab_size": 64, "seq_len": 32, "num_kv_pairs": 2,
        "d_model": 16, "n_layers": 2, "n_heads": 2, "batch_size": 8, "n_train": 0, "n_test": 16, "steps": 6,
        "eval_every": 3, "log_every": 1, "early_stop_acc": 0.0, "device": "cpu", "precision": "fp64", "lr": 0.01})";

std::map<std::pair<int64_t, std::string>, double> train_rows(const std::string& db_path) {
  ResultsDB db(db_path, OpenMode::read_only);
  REQUIRE(db.runs().size() == 1);
  std::map<std::pair<int64_t, std::string>, double> rows;
  for (const MetricRow& m : db.metrics(db.runs()[0].id))
    if ((m.split == "train" && (m.name == "loss" || m.name == "grad_norm")) || m.split == "test")
      rows[{m.step, m.split + "/" + m.name}] = m.value;
  return rows;
}

}  // namespace

TEST_CASE("distributed: the rank's place from torchrun's or Slurm's environment", "[distributed]") {
  DistEnv none = dist_env_from({});
  REQUIRE(none.world_size == 1);
  REQUIRE_FALSE(none.distributed());
  DistEnv t = dist_env_from(
      {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.7"}, {"MASTER_PORT", "29611"}});
  REQUIRE((t.rank == 3 && t.world_size == 4 && t.local_rank == 1 && t.master_addr == "10.0.0.7" &&
           t.master_port == 29611 && t.source == "torchrun"));
  REQUIRE_THROWS_WITH(dist_env_from({{"WORLD_SIZE", "2"}}), Catch::Contains("WORLD_SIZE is set but RANK is not"));
  REQUIRE_THROWS_WITH(dist_env_from({{"RANK", "0"}}), Catch::Contains("RANK is set but WORLD_SIZE is not"));
  REQUIRE_THROWS_WITH(dist_env_from({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}),
                      Catch::Contains("RANK=2 is outside [0, WORLD_SIZE=2)"));
  REQUIRE_THROWS_WITH(dist_env_from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
                      Catch::Contains("MASTER_PORT=70000"));
  REQUIRE_THROWS_WITH(dist_env_from({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), Catch::Contains("MASTER_ADDR and MASTER_PORT"));
  REQUIRE_THROWS_WITH(dist_env_from({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), Catch::Contains("RANK=x"));

  DistEnv s = dist_env_from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                             {"SLURM_JOB_NODELIST", "gpu[03-05,07],cpu1"}});
  REQUIRE((s.rank == 5 && s.world_size == 8 && s.local_rank == 1 && s.master_addr == "gpu03" &&
           s.master_port == 29500 && s.source == "slurm"));
  REQUIRE_FALSE(dist_env_from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).distributed());  // one task: no job
  // torchrun with one process is a one-rank job (a one-rank group, as torch.distributed forms).
  REQUIRE(dist_env_from({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).distributed());
  REQUIRE_THROWS_WITH(dist_env_from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}), Catch::Contains("SLURM_JOB_NODELIST"));
  REQUIRE(first_slurm_host("node7") == "node7");
  REQUIRE(first_slurm_host("a[1-2],b3") == "a1");
  REQUIRE(first_slurm_host("x-[008,010]-ib") == "x-008-ib");
  REQUIRE_THROWS_WITH(first_slurm_host("a[1-2"), Catch::Contains("unclosed"));
}

TEST_CASE("distributed: 2 ranks over Gloo train as 1 rank with the same global batch (fp64)", "[distributed][cli]") {
  auto dir = test::temp_dir("ddp_equal");
  write_text(dir / "run.json", kTinyRun);
  const std::string bin = MNEMO_BINARY, cfg = (dir / "run.json").string();
  auto one = test::run_mnemo("train --config " + cfg + " --db " + (dir / "one.sqlite").string() + " --out " +
                             (dir / "one").string() + " --quiet");
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  auto two = test::run_mnemo("train --nproc 2 --config " + cfg + " --db " + (dir / "two.sqlite").string() +
                             " --out " + (dir / "two").string());
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  REQUIRE_THAT(two.output, Catch::Contains("\"world_size\":2"));
  REQUIRE_THAT(two.output, Catch::Contains("step 6/6"));  // rank 0's progress lines (once: the other rank is quiet)
  REQUIRE(two.output.find("step 6/6") == two.output.rfind("step 6/6"));

  // --nproc 1: a one-rank job (a one-rank Gloo group; on CUDA a one-rank NCCL group).
  auto job1 = test::run_mnemo("train --nproc 1 --config " + cfg + " --db " + (dir / "job1.sqlite").string() +
                              " --out " + (dir / "job1").string());
  INFO(job1.output);
  REQUIRE(job1.exit_code == 0);
  REQUIRE_THAT(job1.output, Catch::Contains("\"dist_backend\":\"gloo\"") && Catch::Contains("\"world_size\":1"));

  // The same loss trajectory, gradient norms and held-out figures, within fp64 rounding.
  const auto a = train_rows((dir / "one.sqlite").string()), b = train_rows((dir / "two.sqlite").string());
  REQUIRE(train_rows((dir / "job1.sqlite").string()) == a);  // one rank: bit for bit
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() >= 6 * 2 + 2);
  for (const auto& [key, v] : a) {
    INFO("step " << key.first << " " << key.second);
    REQUIRE(b.count(key) == 1);
    REQUIRE(std::abs(b.at(key) - v) <= 1e-9 * std::max(1.0, std::abs(v)));
  }
  // The same final weights (the checkpoint of rank 0), in float64.
  Backbone wa = load_backbone((dir / "one").string(), torch::kCPU), wb = load_backbone((dir / "two").string(), torch::kCPU);
  auto pa = wa.module->named_parameters(), pb = wb.module->named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (const auto& p : pa) {
    INFO(p.key());
    REQUIRE(p.value().scalar_type() == torch::kFloat64);
    REQUIRE(test::max_rel_err(pb[p.key()], p.value(), 1e-12) < 1e-9);
  }
  // The job's shape is recorded beside the config; its hash is the one-rank run's (the same experiment).
  ResultsDB da((dir / "one.sqlite").string(), OpenMode::read_only), db((dir / "two.sqlite").string(), OpenMode::read_only);
  const json recorded = json::parse(db.runs()[0].config_json);
  REQUIRE(recorded["world_size"] == 2);
  REQUIRE(recorded["rank_batch_size"] == 4);
  REQUIRE(recorded["global_batch_size"] == 8);
  REQUIRE(recorded["dist_backend"] == "gloo");
  REQUIRE(db.runs()[0].config_hash == da.runs()[0].config_hash);
  REQUIRE(db.runs()[0].status == "completed");
  REQUIRE(recorded["dist_overlap"] == true);
  mnemo::test::remove_dir_tree(dir);
}

// The all-reduce overlapped with the backward (Distributed::attach_gradients): with buckets of ~1 KB the model's
// gradients fill many buckets, each launched from a parameter's AccumulateGrad hook while the backward goes on;
// the trajectory must be the one-rank run's, with gradient accumulation too (a bucket then carries the .grad of the
// earlier micro-batch plus the last one's part), and the same as all-reducing after the backward.
TEST_CASE("distributed: bucketed all-reduce overlapped with the backward gives the one-rank trajectory",
          "[distributed][cli]") {
  auto dir = test::temp_dir("ddp_overlap");
  json run = json::parse(kTinyRun);
  run["grad_accum"] = 2;
  run["batch_size"] = 4;
  write_text(dir / "run.json", run.dump());
  const std::string cfg = (dir / "run.json").string();
  auto train = [&](const std::string& name, const std::string& flags) {
    auto r = test::run_mnemo("train " + flags + " --config " + cfg + " --db " + (dir / (name + ".sqlite")).string() +
                             " --out " + (dir / name).string() + " --quiet");
    INFO(name << ": " << r.output);
    REQUIRE(r.exit_code == 0);
    return r.output;
  };
  train("one", "");
  const std::string overlapped = train("overlap", "--nproc 2 --dist-bucket-mb 0.001");
  const std::string after = train("after", "--nproc 2 --dist-bucket-mb 0.001 --no-dist-overlap");
  auto summary = [](const std::string& out) {  // the last line: the JSON summary
    const size_t start = out.rfind("\n{");
    return json::parse(out.substr(start == std::string::npos ? 0 : start + 1));
  };
  const json s_overlap = summary(overlapped), s_after = summary(after);
  INFO(s_overlap.dump() << "\n" << s_after.dump());
  REQUIRE(s_overlap["buckets_in_backward_per_step"].get<double>() > 4);  // many buckets, launched during backward
  REQUIRE(s_after["buckets_in_backward_per_step"].get<double>() == 0);
  const auto a = train_rows((dir / "one.sqlite").string());
  for (const std::string name : {"overlap", "after"}) {
    const auto b = train_rows((dir / (name + ".sqlite")).string());
    REQUIRE(a.size() == b.size());
    for (const auto& [key, v] : a) {
      INFO(name << " step " << key.first << " " << key.second);
      REQUIRE(b.count(key) == 1);
      REQUIRE(std::abs(b.at(key) - v) <= 1e-9 * std::max(1.0, std::abs(v)));
    }
  }
  ResultsDB db((dir / "after.sqlite").string(), OpenMode::read_only);
  const json recorded = json::parse(db.runs()[0].config_json);
  REQUIRE(recorded["dist_overlap"] == false);
  REQUIRE(recorded["dist_bucket_bytes"] == 1048);
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("distributed: resume a 2-rank run on 1 rank (same global batch) continues its trajectory",
          "[distributed][cli]") {
  auto dir = test::temp_dir("ddp_resume");
  write_text(dir / "run.json", kTinyRun);
  const std::string cfg = (dir / "run.json").string();
  auto whole = test::run_mnemo("train --config " + cfg + " --db " + (dir / "w.sqlite").string() + " --out " +
                               (dir / "w").string() + " --quiet");
  REQUIRE(whole.exit_code == 0);
  auto first = test::run_mnemo("train --nproc 2 --stop-after 3 --config " + cfg + " --db " +
                               (dir / "r.sqlite").string() + " --out " + (dir / "r").string() + " --quiet");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  auto rest = test::run_mnemo("train --resume --config " + cfg + " --db " + (dir / "r.sqlite").string() + " --out " +
                              (dir / "r").string() + " --quiet");
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  const auto a = train_rows((dir / "w.sqlite").string()), b = train_rows((dir / "r.sqlite").string());
  REQUIRE(a.size() == b.size());
  for (const auto& [key, v] : a) {
    INFO("step " << key.first << " " << key.second);
    REQUIRE(std::abs(b.at(key) - v) <= 1e-9 * std::max(1.0, std::abs(v)));
  }
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("distributed: a rank killed mid-run ends the other with an error naming it", "[distributed][cli]") {
  auto dir = test::temp_dir("ddp_kill");
  std::string run = kTinyRun;
  run.replace(run.find("\"steps\": 6"), 10, "\"steps\": 1000000");
  write_text(dir / "run.json", run);
  const int port = free_port();
  const std::string common = std::string(MNEMO_BINARY) + " train --config " + (dir / "run.json").string() +
                             " --db " + (dir / "r.sqlite").string() + " --out " + (dir / "run").string() +
                             " --dist-timeout 60";
  const std::string env = "MNEMO_THREADS=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port);
  // Both ranks started by hand (as torchrun would); rank 1 is killed (SIGKILL) once rank 0 logged step 3.
  const std::string out = shell(
      dir, env + " RANK=0 " + common + " > " + (dir / "r0.log").string() + " 2>&1 & p0=$!\n" + env + " RANK=1 " +
               common + " > " + (dir / "r1.log").string() + " 2>&1 & p1=$!\n" +
               "for i in $(seq 600); do grep -q 'step 3/' " + (dir / "r0.log").string() +
               " && break; sleep 0.1; done\n"
               "kill -KILL $p1; start=$(date +%s); wait $p0; echo \"rc0=$?\"; echo \"waited=$(( $(date +%s) - start ))\"");
  const std::string log0 = read_text(dir / "r0.log");
  INFO(out << "\n--- rank 0:\n" << log0);
  REQUIRE_THAT(out, !Catch::Contains("rc0=0"));
  REQUIRE_THAT(log0, Catch::Contains("mnemo: error: rank 0: the ") && Catch::Contains("rank 1 (pid"));
  REQUIRE_THAT(log0, Catch::Contains("is gone"));
  const auto waited = out.substr(out.find("waited=") + 7);
  REQUIRE(std::stoi(waited) < 30);  // well within the 60-s collective timeout: the closed socket is noticed at once
  ResultsDB db((dir / "r.sqlite").string(), OpenMode::read_only);
  REQUIRE(db.runs().size() == 1);
  REQUIRE(db.runs()[0].status == "failed");
  REQUIRE_THAT(db.runs()[0].message, Catch::Contains("rank 1"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("distributed: two ranks started as Slurm starts them (srun's variables)", "[distributed][cli]") {
  auto dir = test::temp_dir("ddp_slurm");
  write_text(dir / "run.json", kTinyRun);
  const std::string common = std::string(MNEMO_BINARY) + " train --config " + (dir / "run.json").string() +
                             " --set steps=2 --quiet --db " + (dir / "r.sqlite").string() + " --out " +
                             (dir / "run").string() + " --dist-timeout 60";
  const std::string env = "MNEMO_THREADS=1 SLURM_NTASKS=2 SLURM_JOB_NODELIST=localhost MASTER_PORT=" +
                          std::to_string(free_port());
  const std::string out = shell(dir, env + " SLURM_PROCID=1 SLURM_LOCALID=1 " + common + " & p1=$!\n" + env +
                                         " SLURM_PROCID=0 SLURM_LOCALID=0 " + common + "; echo rc0=$?; wait $p1; echo rc1=$?");
  INFO(out);
  REQUIRE_THAT(out, Catch::Contains("rc0=0") && Catch::Contains("rc1=0"));
  ResultsDB db((dir / "r.sqlite").string(), OpenMode::read_only);
  REQUIRE(db.runs().size() == 1);  // rank 0 alone writes
  REQUIRE(db.runs()[0].status == "completed");
  REQUIRE(json::parse(db.runs()[0].config_json)["world_size"] == 2);
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("distributed: bad jobs end with one clear error", "[distributed][cli]") {
  auto dir = test::temp_dir("ddp_bad");
  write_text(dir / "run.json", kTinyRun);
  const std::string train = std::string(MNEMO_BINARY) + " train --config " + (dir / "run.json").string() +
                            " --quiet --db " + (dir / "r.sqlite").string() + " --out " + (dir / "run").string();
  auto rc = [](const std::string& text) { return text.substr(text.rfind("rc=")); };
  // WORLD_SIZE without RANK.
  std::string out = shell(dir, "WORLD_SIZE=2 " + train + "; echo rc=$?");
  REQUIRE_THAT(out, Catch::Contains("mnemo: error: environment: WORLD_SIZE is set but RANK is not"));
  REQUIRE(rc(out) != "rc=0\n");
  // A rank that cannot reach rank 0's store within the timeout.
  const int port = free_port();
  out = shell(dir, "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " " + train +
                       " --dist-timeout 2; echo rc=$?");
  REQUIRE_THAT(out, Catch::Contains("rank 1 of 2: could not reach the rendezvous store of rank 0 at 127.0.0.1:" +
                                    std::to_string(port)));
  REQUIRE(rc(out) != "rc=0\n");
  // The port of rank 0 in use.
  out = shell(dir, "python3 -c 'import socket,time;s=socket.socket();s.bind((\"127.0.0.1\"," + std::to_string(port) +
                       "));s.listen();time.sleep(20)' & sleep 1; RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                       std::to_string(port) + " " + train + " --dist-timeout 5; echo rc=$?; kill %1");
  REQUIRE_THAT(out, Catch::Contains("rank 0 of 2: cannot host the rendezvous store on 127.0.0.1:" + std::to_string(port)));
  REQUIRE(rc(out) != "rc=0\n");
  // Ranks started with different configurations.
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port());
  out = shell(dir, env + " RANK=0 " + train + " --dist-timeout 20 & " + env + " RANK=1 " + train +
                       " --set lr=0.02 --dist-timeout 20; echo rc=$?; wait");
  REQUIRE_THAT(out, Catch::Contains("rank 1 runs configuration") && Catch::Contains("every rank must be started with the same config"));
  // batch_size not a multiple of the ranks.
  auto odd = test::run_mnemo("train --nproc 2 --config " + (dir / "run.json").string() +
                             " --set batch_size=7 --quiet --db " + (dir / "r.sqlite").string());
  REQUIRE(odd.exit_code != 0);
  REQUIRE_THAT(odd.output, Catch::Contains("batch_size 7 is not a multiple of the 2 ranks"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("train --nproc: a count, batch or port that cannot work is one line before any rank starts",
          "[distributed][cli][launch]") {
  auto dir = test::temp_dir("dist_launch_checks");
  write_text(dir / "run.json", kTinyRun);
  const std::string train = "train --config " + (dir / "run.json").string() + " --quiet --db " +
                            (dir / "r.sqlite").string() + " --out " + (dir / "run").string();
  auto one_line_error = [](const test::CommandResult& r, const std::string& what) {
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.rfind("mnemo: error: ", 0) == 0);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);  // the launcher's line, none from ranks
    CHECK_THAT(r.output, Catch::Contains(what));
  };
  const double t0 = wall_seconds();
  one_line_error(test::run_mnemo(train + " --nproc 3 --set batch_size=4"),
                 "--nproc 3: batch_size 4 is not a multiple of the 3 ranks");
  one_line_error(test::run_mnemo(train + " --nproc 0"), "--nproc must be >= 1, got 0");
  one_line_error(test::run_mnemo(train + " --nproc -1"), "--nproc must be >= 1, got -1");
  one_line_error(test::run_mnemo(train + " --nproc 4096"), "--nproc 4096 is more than");
  // MASTER_PORT: parsed whole, and refused when something listens on it
  std::string out = shell(dir, "MASTER_PORT=abc " + std::string(MNEMO_BINARY) + " " + train + " --nproc 2; echo rc=$?");
  CHECK_THAT(out, Catch::Contains("mnemo: error: --nproc: MASTER_PORT='abc' is not a port number"));
  CHECK_THAT(out, !Catch::Contains("MASTER_PORT=0"));
  const int busy = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(busy, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(busy, 1) == 0);
  ::getsockname(busy, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  out = shell(dir, "MASTER_PORT=" + std::to_string(port) + " " + std::string(MNEMO_BINARY) + " " + train +
                       " --nproc 2; echo rc=$?");
  ::close(busy);
  CHECK_THAT(out, Catch::Contains("mnemo: error: --nproc: MASTER_PORT " + std::to_string(port) + " cannot be used") &&
                      Catch::Contains("rc=1"));
  CHECK_THAT(out, !Catch::Contains("WARNING"));  // no rendezvous was tried
  CHECK(wall_seconds() - t0 < 20);               // every refusal comes before a rank starts
  CHECK_FALSE(fs::exists(dir / "r.sqlite"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("sweep --shard i/N + db merge: the same completed cells as one sweep", "[distributed][sweep][cli]") {
  auto dir = test::temp_dir("sweep_shard");
  write_text(dir / "sweep.json",
             R"({"name": "sharded", "base": {"task": "mqar", "vocab_size": 64, "seq_len": 32, "num_kv_pairs": 2,
                 "d_model": 16, "n_layers": 1, "n_heads": 2, "batch_size": 8, "n_train": 64, "n_test": 16, "steps": 3,
                 "eval_every": 3, "early_stop_acc": 0.0, "device": "cpu"},
                 "grid": {"model": ["transformer", "gated_deltanet"], "lr": [0.001, 0.003, 0.01]}})");
  const std::string sweep = "sweep --config " + (dir / "sweep.json").string();
  auto all = test::run_mnemo(sweep + " --db " + (dir / "all.sqlite").string() + " --out " + (dir / "all").string());
  REQUIRE(all.exit_code == 0);
  for (int i = 0; i < 2; ++i) {
    auto part = test::run_mnemo(sweep + " --shard " + std::to_string(i) + "/2 --db " + (dir / ("s" + std::to_string(i) + ".sqlite")).string() +
                                " --out " + (dir / ("s" + std::to_string(i))).string());
    INFO(part.output);
    REQUIRE(part.exit_code == 0);
    REQUIRE_THAT(part.output, Catch::Contains("shard " + std::to_string(i) + "/2 holds 3 of the grid's 6 cells"));
  }
  const std::string merged = (dir / "merged.sqlite").string();
  auto m = test::run_mnemo("db merge " + merged + " " + (dir / "s0.sqlite").string() + " " + (dir / "s1.sqlite").string());
  INFO(m.output);
  REQUIRE(m.exit_code == 0);
  REQUIRE_THAT(m.output, Catch::Contains("\"runs_copied\":6"));
  // Merging a shard again copies nothing (no duplicated cell).
  auto again = test::run_mnemo("db merge " + merged + " " + (dir / "s1.sqlite").string());
  REQUIRE(again.exit_code == 0);
  REQUIRE_THAT(again.output, Catch::Contains("\"runs_copied\":0"));

  // The same cells with the same figures as the single-machine sweep; run ids renumbered consistently.
  auto cells = [](const std::string& path) {
    ResultsDB db(path, OpenMode::read_only);
    std::map<std::string, std::map<std::string, double>> out;
    for (const RunInfo& r : db.runs()) {
      REQUIRE(r.status == "completed");
      for (const MetricRow& mr : db.metrics(r.id)) {
        REQUIRE(mr.run_id == r.id);
        if (mr.split != "summary") out[r.config_hash][mr.split + "/" + mr.name + "@" + std::to_string(mr.step)] = mr.value;
      }
    }
    return out;
  };
  const auto single = cells((dir / "all.sqlite").string()), joined = cells(merged);
  REQUIRE(single.size() == 6);
  REQUIRE(joined.size() == 6);
  for (const auto& [hash, rows] : single) {
    INFO(hash);
    REQUIRE(joined.count(hash) == 1);
    for (const auto& [k, v] : rows)
      if (k.rfind("train/tokens_per_s", 0) != 0) REQUIRE(joined.at(hash).at(k) == Approx(v).epsilon(1e-6));
  }
  auto report = test::run_mnemo("report --db " + merged + " --out " + (dir / "report").string());
  INFO(report.output);
  REQUIRE(report.exit_code == 0);

  // Bad input.
  auto range = test::run_mnemo(sweep + " --shard 2/2 --db " + (dir / "x.sqlite").string());
  REQUIRE(range.exit_code != 0);
  REQUIRE_THAT(range.output, Catch::Contains("--shard 2/2: shard 2 is outside [0, 2)"));
  auto shape = test::run_mnemo(sweep + " --shard half --db " + (dir / "x.sqlite").string());
  REQUIRE_THAT(shape.output, Catch::Contains("--shard 'half' is not i/N"));
  {
    ResultsDB other((dir / "v99.sqlite").string());
    other.exec("UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  }
  auto schema = test::run_mnemo("db merge " + merged + " " + (dir / "v99.sqlite").string());
  REQUIRE(schema.exit_code != 0);
  REQUIRE_THAT(schema.output, Catch::Contains("v99.sqlite: schema_version 99 is not supported"));
  auto self = test::run_mnemo("db merge " + merged + " " + merged);
  REQUIRE_THAT(self.output, Catch::Contains("is also an input"));
  auto missing = test::run_mnemo("db merge " + merged + " " + (dir / "nope.sqlite").string());
  REQUIRE_THAT(missing.output, Catch::Contains("nope.sqlite does not exist"));
  mnemo::test::remove_dir_tree(dir);
}
