#include "engine/sweep.h"
#include "core/defaults.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <ATen/Parallel.h>

#include "results/db.h"
#include "engine/run_config.h"

extern char** environ;

namespace mnemo {
namespace fs = std::filesystem;

std::vector<json> expand_sweep(const json& sweep) {
  if (!sweep.is_object()) throw Error("sweep file must be a JSON object with base/cases/grid");
  for (auto it = sweep.begin(); it != sweep.end(); ++it)
    if (it.key() != "name" && it.key() != "base" && it.key() != "cases" && it.key() != "grid" &&
        it.key() != "description")
      throw Error("unknown sweep field '" + it.key() + "' (expected name, description, base, cases, grid)");
  json base = sweep.value("base", json::object());
  json cases = sweep.value("cases", json::array({json::object()}));
  json grid = sweep.value("grid", json::object());
  if (!base.is_object()) throw Error("sweep field 'base' must be an object");
  if (!cases.is_array() || cases.empty()) throw Error("sweep field 'cases' must be a non-empty array");
  if (!grid.is_object()) throw Error("sweep field 'grid' must be an object of arrays");
  std::vector<std::pair<std::string, json>> axes;
  for (auto it = grid.begin(); it != grid.end(); ++it) {
    if (!it.value().is_array() || it.value().empty())
      throw Error("sweep grid key '" + it.key() + "' must be a non-empty array");
    axes.emplace_back(it.key(), it.value());
  }
  std::vector<json> cells;
  for (const auto& c : cases) {
    if (!c.is_object()) throw Error("each sweep case must be an object");
    std::vector<size_t> idx(axes.size(), 0);
    while (true) {
      json cell = base;
      cell.update(c);
      for (size_t a = 0; a < axes.size(); ++a) cell[axes[a].first] = axes[a].second[idx[a]];
      cells.push_back(cell);
      size_t a = axes.size();
      while (a > 0) {
        --a;
        if (++idx[a] < axes[a].second.size()) break;
        idx[a] = 0;
        if (a == 0) { a = SIZE_MAX; break; }
      }
      if (axes.empty() || a == SIZE_MAX) break;
    }
  }
  return cells;
}

namespace {

std::string describe(const json& cell) {
  std::string s = cell.value("model", "?") + " " + cell.value("task", "?");
  for (auto it = cell.begin(); it != cell.end(); ++it)
    if (it.key() != "model" && it.key() != "task" && (it.key() == "d_model" || it.key() == "lr" ||
                                                      it.key() == "seq_len" || it.key() == "num_kv_pairs"))
      s += " " + it.key() + "=" + it.value().dump();
  return s;
}

struct Job {
  pid_t pid;
  json cell;
  std::string out_dir;
  double start;
};

std::string last_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

SweepSummary run_sweep(const json& sweep, const SweepOptions& opt) {
  const std::string name = sweep.value("name", "sweep");
  const std::string out_root = opt.out_root.empty() ? std::string(kDefaultRunsDir) + "/sweep-" + name : opt.out_root;
  auto cells = expand_sweep(sweep);
  // Resolve everything first: a bad cell fails the sweep before any run starts.
  std::vector<std::pair<json, std::string>> todo;
  SweepSummary sum;
  sum.total = static_cast<int>(cells.size());
  {
    ResultsDB db(opt.db_path);
    for (const auto& c : cells) {
      json resolved = resolve_run_config(c);
      const std::string hash = config_hash(resolved);
      if (db.completed_run_with_hash(hash)) {
        ++sum.skipped;
        continue;
      }
      todo.emplace_back(c, hash);
    }
  }
  std::printf("sweep '%s': %d cells, %d already completed, %zu to run with %d worker(s)\n", name.c_str(),
              sum.total, sum.skipped, todo.size(), opt.jobs);
  std::fflush(stdout);
  // The threads this process was given ($MNEMO_THREADS / $OMP_NUM_THREADS, else the cores), shared
  // between the workers: oversubscribed OpenMP threads spin and collapse throughput.
  const int threads_per_job = std::max(1, at::get_num_threads() / std::max(1, opt.jobs));
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const double t0 = wall_seconds();

  std::vector<Job> running;
  size_t next = 0;
  int done = 0;
  // Wait for any worker to finish and report it.
  auto reap_one = [&]() {
    int status = 0;
    pid_t r = waitpid(-1, &status, 0);
    if (r < 0) throw Error("waiting for sweep workers failed");
    auto it = std::find_if(running.begin(), running.end(), [r](const Job& j) { return j.pid == r; });
    if (it == running.end()) return;
    ++done;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::string log = (fs::path(it->out_dir) / "train.log").string();
    std::string tail = last_line(log);
    if (ok) {
      ++sum.completed;
      double acc = -1;
      try { acc = json::parse(tail).value("best_test_accuracy", -1.0); } catch (...) {}
      std::printf("[%d/%zu] done   %s  best test acc %.4f  (%.1f s)\n", done, todo.size(),
                  describe(it->cell).c_str(), acc, wall_seconds() - it->start);
    } else {
      ++sum.failed;
      sum.failures.push_back(describe(it->cell) + ": " + tail + " (log: " + log + ")");
      std::printf("[%d/%zu] FAILED %s: %s\n", done, todo.size(), describe(it->cell).c_str(), tail.c_str());
    }
    std::fflush(stdout);
    running.erase(it);
  };

  while (next < todo.size() || !running.empty()) {
    while (next < todo.size() && static_cast<int>(running.size()) < std::max(1, opt.jobs)) {
      const auto& [cell, hash] = todo[next++];
      const std::string out_dir = (fs::path(out_root) / (cell.value("model", "model") + "-" + hash)).string();
      fs::create_directories(out_dir);
      const std::string cfg_file = (fs::path(out_dir) / "cell.json").string();
      { std::ofstream(cfg_file) << cell.dump(2); }
      std::vector<std::string> args = {self, "train", "--config", cfg_file, "--db", opt.db_path, "--out", out_dir,
                                       "--sweep", name, "--quiet"};
      if (fs::exists(fs::path(out_dir) / "checkpoint" / "trainer.json")) args.push_back("--resume");
      if (!opt.device.empty()) { args.push_back("--device"); args.push_back(opt.device); }
      std::vector<char*> argv;
      for (auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
      argv.push_back(nullptr);
      // Environment: this process's, with the thread budget split between workers.
      std::vector<std::string> env_store;
      for (char** e = environ; *e; ++e)
        if (std::string(*e).rfind("MNEMO_THREADS=", 0) != 0 && std::string(*e).rfind("OMP_NUM_THREADS=", 0) != 0)
          env_store.emplace_back(*e);
      env_store.push_back("MNEMO_THREADS=" + std::to_string(threads_per_job));
      env_store.push_back("OMP_NUM_THREADS=" + std::to_string(threads_per_job));
      std::vector<char*> envp;
      for (auto& s : env_store) envp.push_back(const_cast<char*>(s.c_str()));
      envp.push_back(nullptr);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      const std::string log = (fs::path(out_dir) / "train.log").string();
      posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&fa, 1, 2);
      pid_t pid;
      int rc = posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), envp.data());
      posix_spawn_file_actions_destroy(&fa);
      if (rc != 0) throw Error("cannot start worker process " + self);
      running.push_back({pid, cell, out_dir, wall_seconds()});
    }
    if (!running.empty()) reap_one();
  }
  sum.wall_s = wall_seconds() - t0;
  std::printf("sweep '%s': %d completed, %d skipped, %d failed in %.1f s\n", name.c_str(), sum.completed,
              sum.skipped, sum.failed, sum.wall_s);
  return sum;
}

}  // namespace mnemo
