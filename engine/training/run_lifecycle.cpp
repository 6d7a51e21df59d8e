#include "engine/training/run_lifecycle.h"

#include "core/process.h"
#include "engine/config/run_config.h"

#include <c10/util/Exception.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace mnemo {
namespace fs = std::filesystem;

void check_out_dir_writable(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error("cannot create the output folder " + out_dir + ": " + ec.message());
  if (!fs::is_directory(out_dir, ec)) throw Error("the output folder " + out_dir + " is not a folder");
  const fs::path probe = fs::path(out_dir) / (".mnemo_write_probe_" + std::to_string(::getpid()));
  {
    std::ofstream o(probe);
    o << "probe\n";
    o.flush();
    if (!o) {
      fs::remove(probe, ec);
      throw Error("the output folder " + out_dir + " is not writable");
    }
  }
  fs::remove(probe, ec);
}

double estimate_example_bytes(const TokenTask& task, Split split, int64_t n, uint64_t seed) {
  if (n <= 0) return 0;
  const int64_t k = std::min<int64_t>(n, 16);
  const auto sample = task.examples(split, k, seed);
  if (sample.empty()) return 0;
  double bytes = 0;
  for (const auto& e : sample)
    bytes += sizeof(TokenExample) + sizeof(int64_t) * double(e.input_ids.capacity() + e.labels.capacity()) +
             (e.meta.is_null() ? 0.0 : 64.0 + double(e.meta.dump().size()));
  return bytes / double(sample.size()) * double(n);
}

void check_example_memory(const TokenTask& task, int64_t n_train, int64_t n_test, uint64_t seed) {
  const double train_b = estimate_example_bytes(task, Split::train, n_train, seed);
  const double test_b = estimate_example_bytes(task, Split::test, n_test, seed);
  if (train_b + test_b <= double(kMaxExampleBytes)) return;
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "n_train=%lld and n_test=%lld would hold about %.1f GB of examples in memory (train %.1f GB, "
                "test %.1f GB; the limit is %.0f GB): lower them, or set n_train=0 to draw fresh examples every step",
                (long long)n_train, (long long)n_test, (train_b + test_b) / 1e9, train_b / 1e9, test_b / 1e9,
                double(kMaxExampleBytes) / (1 << 30));
  throw Error(buf);
}

std::string error_line(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return one_line_message(c->what_without_backtrace());
  return one_line_message(e.what());
}

void refuse_if_running_elsewhere(const ResultsDB& db, const RunInfo& run) {
  if (run.status != "running") return;
  const RunProcess p = db.run_process(run.id);
  if (p.pid <= 0 || p.pid == ::getpid() || p.host != hostname() || !process_alive(p.pid)) return;
  throw Error("run " + std::to_string(run.id) + " is still running in process " + std::to_string(p.pid) + " on " +
              p.host + " (folder " + run.out_dir + "); stop it first (SIGINT or SIGTERM) or use another --out");
}

std::optional<RunInfo> adoptable_run(const ResultsDB& db, const std::string& out_dir, const std::string& config_hash) {
  std::optional<RunInfo> found;
  for (const RunInfo& r : db.runs())
    if (r.out_dir == out_dir && r.config_hash == config_hash && r.status != "completed") found = r;  // the newest
  if (found) refuse_if_running_elsewhere(db, *found);
  return found;
}

void read_checkpoint(RunRecord& rec, const std::string& hash, bool resume, const std::string& out_dir,
                     Distributed* dist, bool main_rank, bool quiet) {
  if (resume && main_rank && has_checkpoint(out_dir)) {
    const std::string note = recover_checkpoint(out_dir);
    if (!note.empty() && !quiet) std::printf("%s: %s\n", out_dir.c_str(), note.c_str());
  }
  if (dist && resume) dist->barrier("checkpoint recovery");
  if (!resume || !has_checkpoint(out_dir)) return;
  json saved = load_checkpoint_config(out_dir), saved_resolved;
  try {
    saved_resolved = resolve_run_config(saved);
  } catch (const Error& e) {
    throw Error("--resume: the checkpoint in " + out_dir + " has a configuration this mnemo cannot use: " + e.what());
  }
  if (config_hash(saved_resolved) != hash)
    throw Error("--resume: the configuration differs from the checkpoint in " + out_dir);
  rec.state = load_trainer_state(out_dir);
  rec.resuming = true;
}

// Rank 0: the checkpoint's row (which must be this run's), or with --resume and no checkpoint a row to adopt.
void find_run_row(RunRecord& rec, const ResultsDB& db, const std::string& hash, bool resume,
                  const std::string& db_path, const std::string& out_dir) {
  if (rec.resuming) {
    auto run = db.run(rec.state.run_id);
    if (!run) throw Error("--resume: run " + std::to_string(rec.state.run_id) + " not found in " + db_path);
    if (run->config_hash != hash)
      throw Error("--resume: run " + std::to_string(rec.state.run_id) + " in " + db_path +
                  " is another run (its config differs); the checkpoint was logged to " +
                  (rec.state.db_path.empty() ? std::string("another database") : rec.state.db_path));
    if (run->status == "completed") {
      rec.completed_already = true;
      rec.completed_run = run;
    } else {
      refuse_if_running_elsewhere(db, *run);
    }
  } else if (resume) {
    rec.adopted = adoptable_run(db, out_dir, hash);
    if (rec.adopted)
      std::printf("no checkpoint in %s: restarting run %lld (%s) from step 0\n", out_dir.c_str(),
                  (long long)rec.adopted->id, rec.adopted->status.c_str());
    else
      std::printf("no checkpoint in %s: starting a new run\n", out_dir.c_str());
  }
}

// Data-parallel: every rank resumes from the same step, or none does; a completed run ends every rank.
void agree_on_resume(RunRecord& rec, Distributed& dist, const DistEnv& env, const std::string& out_dir) {
  const int world = env.world_size;
  const auto c = dist.all_reduce_sum({rec.resuming ? 1.0 : 0.0, double(rec.state.step), rec.completed_already ? 1.0 : 0.0},
                                     -1, "resume check");
  if (c[0] != 0 && (c[0] != world || c[1] != double(world) * double(rec.state.step)))
    throw Error("rank " + std::to_string(env.rank) +
                (rec.resuming ? " resumes from step " + std::to_string(rec.state.step) : std::string(" sees no checkpoint")) +
                " in " + out_dir + " but another rank does not: every rank must read the same checkpoint");
  if (c[2] > 0) rec.completed_already = true;
}

}  // namespace mnemo
