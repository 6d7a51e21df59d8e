#include "engine/tools/sweep.h"
#include "core/parse_int.h"
#include "core/defaults.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <ATen/Parallel.h>

#include "core/atomic_file.h"
#include "core/signals.h"
#include "engine/io/checkpoint.h"
#include "engine/config/run_config.h"
#include "engine/tools/sweep_progress.h"
#include "results/db.h"

extern char** environ;

namespace mnemo {
namespace fs = std::filesystem;

std::vector<json> expand_sweep(const json& sweep) {
  if (!sweep.is_object())
    throw Error("sweep file must be a JSON object with name, base, cases, grid; got " +
                std::string(sweep.is_null() ? "null" : sweep.is_array() ? "an array" : "a " + std::string(sweep.type_name())));
  for (const char* text_field : {"name", "description"})
    if (sweep.contains(text_field) && !sweep.at(text_field).is_string())
      throw Error(std::string("sweep field '") + text_field + "' must be a string, got " + sweep.at(text_field).dump());
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
  // Count before expanding: a grid's product grows fast (9 axes of 30 values are 2e13 cells).
  double n_cells = static_cast<double>(cases.size());
  for (const auto& [key, values] : axes) n_cells *= static_cast<double>(values.size());
  if (n_cells > kMaxSweepCells) {
    char count[32];
    std::snprintf(count, sizeof count, "%.4g", n_cells);
    throw Error("sweep expands to " + std::string(count) + " cells (" +
                std::to_string(cases.size()) + " cases x the grid's product), more than " +
                std::to_string(kMaxSweepCells) + "; split it into several sweep files");
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
  // An MQAR mixture trains on train_num_kv_pairs: its num_kv_pairs is not what the run trains on.
  const bool mixture = cell.contains("train_num_kv_pairs") && cell["train_num_kv_pairs"].is_array() &&
                       !cell["train_num_kv_pairs"].empty();
  for (auto it = cell.begin(); it != cell.end(); ++it) {
    const std::string& k = it.key();
    const bool shown = k == "d_model" || k == "lr" || k == "seq_len" || (k == "num_kv_pairs" && !mixture) ||
                       (k == "train_num_kv_pairs" && mixture);
    if (shown) s += " " + k + "=" + it.value().dump();
  }
  return s;
}

struct Job {
  pid_t pid;
  json cell;
  std::string hash, out_dir;
  double start;
  int lock_fd;
};

std::string last_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  return last;
}

// Takes <out_dir>/.lock (flock, exclusive, non-blocking) for this process and, once inherited,
// its worker: the lock lives as long as either holds the open file. -1 if another process holds it
// (`holder` then says who wrote it).
int lock_run_folder(const std::string& out_dir, std::string& holder) {
  const std::string path = (fs::path(out_dir) / ".lock").string();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot open lock file " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    holder = last_line(path);
    ::close(fd);
    if (err == EWOULDBLOCK) return -1;
    throw Error("cannot lock " + path + ": " + std::strerror(err));
  }
  const std::string who = std::to_string(::getpid()) + " " + hostname() + "\n";
  if (::ftruncate(fd, 0) == 0) {
    ssize_t w = ::write(fd, who.data(), who.size());
    (void)w;
  }
  return fd;
}

void sleep_s(double s) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(s);
  ts.tv_nsec = static_cast<long>((s - static_cast<double>(ts.tv_sec)) * 1e9);
  ::nanosleep(&ts, nullptr);  // a signal cuts it short: the loop polls the stop flag
}

constexpr double kLeaseStaleS = 300;   // a lease without heartbeat for this long is taken over
constexpr double kHeartbeatS = 30;     // how often the sweep refreshes its workers' leases
constexpr double kRetryHeldS = 2;      // how often cells held by another process are tried again

}  // namespace

std::pair<int, int> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  const auto i = slash == std::string::npos ? std::nullopt : parse_whole_int(text.substr(0, slash));
  const auto n = slash == std::string::npos ? std::nullopt : parse_whole_int(text.substr(slash + 1));
  if (!i || !n || *n < 1 || *n > 1000000)
    throw Error("--shard '" + text + "' is not i/N (the i-th of N shards, 0 <= i < N; e.g. 0/4)");
  if (*i < 0 || *i >= *n)
    throw Error("--shard " + text + ": shard " + std::to_string(*i) + " is outside [0, " + std::to_string(*n) +
                ") (shards count from 0, as SLURM_ARRAY_TASK_ID does)");
  return {static_cast<int>(*i), static_cast<int>(*n)};
}

SweepSummary run_sweep(const json& sweep, const SweepOptions& opt) {
  auto cells = expand_sweep(sweep);  // validates the file's shape first (an array, null, a non-string name)
  const std::string name = sweep.value("name", "sweep");
  if (opt.shard_count < 1 || opt.shard_index < 0 || opt.shard_index >= opt.shard_count)
    throw Error("sweep: shard " + std::to_string(opt.shard_index) + "/" + std::to_string(opt.shard_count) +
                " is out of range");
  if (opt.shard_count > 1) {  // round robin: the shards are disjoint, cover the grid and differ by one cell at most
    std::vector<json> mine;
    for (size_t c = 0; c < cells.size(); ++c)
      if (static_cast<int>(c % static_cast<size_t>(opt.shard_count)) == opt.shard_index) mine.push_back(cells[c]);
    std::printf("sweep '%s': shard %d/%d holds %zu of the grid's %zu cells\n", name.c_str(), opt.shard_index,
                opt.shard_count, mine.size(), cells.size());
    cells = std::move(mine);
  }
  const std::string out_root = opt.out_root.empty() ? std::string(kDefaultRunsDir) + "/sweep-" + name : opt.out_root;
  install_stop_handlers();
  // Resolve everything first: a bad cell fails the sweep before any run starts.
  std::vector<std::pair<json, std::string>> todo;
  SweepSummary sum;
  sum.total = static_cast<int>(cells.size());
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
  std::printf("sweep '%s': %d cells, %d already completed, %zu to run with %d worker(s)\n", name.c_str(),
              sum.total, sum.skipped, todo.size(), opt.jobs);
  std::fflush(stdout);
  // The threads this process was given ($MNEMO_THREADS / $OMP_NUM_THREADS, else the cores), shared
  // between the workers: oversubscribed OpenMP threads spin and collapse throughput.
  const int threads_per_job = std::max(1, at::get_num_threads() / std::max(1, opt.jobs));
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const double t0 = wall_seconds();
  const int64_t me = static_cast<int64_t>(::getpid());
  const std::string host = hostname();

  std::vector<Job> running;
  std::deque<size_t> queue;    // cells to claim, in order
  std::vector<size_t> held;    // cells another process is running: tried again every kRetryHeldS
  for (size_t i = 0; i < todo.size(); ++i) queue.push_back(i);
  int done = 0;
  bool forwarded = false, announced_wait = false;
  std::set<size_t> warned_locked;  // cells whose folder was found locked (said once)
  double last_beat = wall_seconds(), last_retry = wall_seconds();
  // Each running cell's progress (its worker's train.log) and the sweep's total, live on a terminal.
  const bool live = !opt.quiet && (opt.live_progress < 0 ? SweepProgress::stdout_is_terminal() : opt.live_progress > 0);
  SweepProgress progress(name, static_cast<int>(todo.size()), std::max(1, opt.jobs), live,
                         opt.quiet ? 0.0 : opt.progress_every_s);

  // A finished worker: report it, unlock its folder, give its cell back.
  auto finish = [&](std::vector<Job>::iterator it, int status) {
    ++done;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    const bool stopped = stop_requested() &&
                         ((WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM)) ||
                          (WIFEXITED(status) && (WEXITSTATUS(status) == 130 || WEXITSTATUS(status) == 143)));
    std::string log = (fs::path(it->out_dir) / "train.log").string();
    std::string tail = last_line(log);
    progress.clear();
    progress.finished(it->pid, wall_seconds(), ok);
    if (ok) {
      ++sum.completed;
      // The run's primary held-out metric (train's summary line): best test accuracy, or e.g. best val ppl.
      std::string metric = "test acc", value = "n/a";
      try {
        const json j = json::parse(tail);
        const std::string primary = j.value("primary_metric", std::string());
        const std::string key = primary.empty() ? "best_test_accuracy" : "best_" + primary;
        if (!primary.empty()) metric = primary;
        if (j.contains(key) && j[key].is_number()) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.4f", j[key].get<double>());
          value = buf;
        }
      } catch (...) {
      }
      std::printf("[%d/%zu] done   %s  best %s %s  (%.1f s)\n", done, todo.size(), describe(it->cell).c_str(),
                  metric.c_str(), value.c_str(), wall_seconds() - it->start);
    } else if (stopped) {
      ++sum.stopped;
      std::printf("[%d/%zu] stopped %s (%s; a re-run resumes it)\n", done, todo.size(), describe(it->cell).c_str(),
                  stop_signal_name());
    } else {
      ++sum.failed;
      sum.failures.push_back(describe(it->cell) + ": " + tail + " (log: " + log + ")");
      std::printf("[%d/%zu] FAILED %s: %s\n", done, todo.size(), describe(it->cell).c_str(), tail.c_str());
    }
    std::fflush(stdout);
    ::close(it->lock_fd);
    db.release_lease(it->hash, me, host);
    running.erase(it);
  };

  // Claims the cell, locks its folder and starts its worker; false if another process has it.
  auto start = [&](size_t idx) -> bool {
    const auto& [cell, hash] = todo[idx];
    const LeaseClaim claim = db.claim_cell(hash, name, me, host, kLeaseStaleS);
    if (claim == LeaseClaim::completed) {
      progress.clear();
      ++done;
      ++sum.skipped;
      std::printf("[%d/%zu] skip   %s (completed by another worker)\n", done, todo.size(), describe(cell).c_str());
      std::fflush(stdout);
      return true;
    }
    if (claim == LeaseClaim::held) return false;
    // One folder per cell (its config hash); only the lock holder writes in it.
    const std::string out_dir = (fs::path(out_root) / (cell.value("model", "model") + "-" + hash)).string();
    fs::create_directories(out_dir);
    std::string holder;
    const int lock_fd = lock_run_folder(out_dir, holder);
    if (lock_fd < 0) {  // e.g. the worker of a sweep that was killed still trains there
      db.release_lease(hash, me, host);
      if (!opt.quiet && warned_locked.insert(idx).second && (progress.clear(), true))
        std::printf("  %s: %s is in use by process %s; waiting\n", describe(cell).c_str(), out_dir.c_str(),
                    holder.c_str());
      return false;
    }
    try {
      const std::string cfg_file = (fs::path(out_dir) / "cell.json").string();
      write_file_atomic(cfg_file, cell.dump(2));  // checked: a cell never starts from a truncated config
      std::vector<std::string> args = {self, "train", "--config", cfg_file, "--db", opt.db_path, "--out", out_dir,
                                       "--sweep", name};
      if (has_checkpoint(out_dir)) args.push_back("--resume");  // a stopped or crashed run of this cell
      if (!opt.device.empty()) { args.push_back("--device"); args.push_back(opt.device); }
      std::vector<char*> argv;
      for (auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
      argv.push_back(nullptr);
      // Environment: this process's, with the thread budget split between workers.
      std::vector<std::string> env_store;
      for (char** e = environ; *e; ++e)
        if (std::string(*e).rfind("MNEMO_THREADS=", 0) != 0 && std::string(*e).rfind("OMP_NUM_THREADS=", 0) != 0 &&
            std::string(*e).rfind("MNEMO_RUN_LOCK_FD=", 0) != 0)
          env_store.emplace_back(*e);
      env_store.push_back("MNEMO_THREADS=" + std::to_string(threads_per_job));
      env_store.push_back("OMP_NUM_THREADS=" + std::to_string(threads_per_job));
      // The worker's inherited descriptor of <out_dir>/.lock, already locked for it (a trainer that
      // locks its folder itself must not lock it a second time through another descriptor).
      env_store.push_back("MNEMO_RUN_LOCK_FD=" + std::to_string(lock_fd));
      std::vector<char*> envp;
      for (auto& s : env_store) envp.push_back(const_cast<char*>(s.c_str()));
      envp.push_back(nullptr);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      // The worker's progress lines and its summary, appended after those of earlier attempts at the cell.
      const std::string log = (fs::path(out_dir) / "train.log").string();
      std::error_code size_error;
      const auto log_size = fs::exists(log) ? fs::file_size(log, size_error) : 0;
      posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      posix_spawn_file_actions_adddup2(&fa, 1, 2);
      // The worker runs in its own process group: a terminal's Ctrl-C reaches the sweep alone,
      // which forwards it once to every worker.
      posix_spawnattr_t attr;
      posix_spawnattr_init(&attr);
      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
      posix_spawnattr_setpgroup(&attr, 0);
      // The worker inherits the folder lock (this fd alone loses close-on-exec while it starts).
      ::fcntl(lock_fd, F_SETFD, 0);
      pid_t pid;
      int rc = posix_spawn(&pid, self.c_str(), &fa, &attr, argv.data(), envp.data());
      ::fcntl(lock_fd, F_SETFD, FD_CLOEXEC);
      posix_spawn_file_actions_destroy(&fa);
      posix_spawnattr_destroy(&attr);
      if (rc != 0) throw Error("cannot start worker process " + self + ": " + std::strerror(rc));
      running.push_back({pid, cell, hash, out_dir, wall_seconds(), lock_fd});
      const std::string model = cell.value("model", "?"), label = describe(cell);
      progress.started(pid, model, label.rfind(model + " ", 0) == 0 ? label.substr(model.size() + 1) : label, log,
                       size_error ? 0 : static_cast<long long>(log_size), wall_seconds());
    } catch (...) {
      ::close(lock_fd);
      db.release_lease(hash, me, host);
      throw;
    }
    return true;
  };

  // On an error (e.g. the DB), the workers are stopped and waited for, and their cells given back.
  auto abandon = [&]() {
    for (const Job& j : running) ::kill(j.pid, SIGTERM);
    for (const Job& j : running) {
      int st = 0;
      ::waitpid(j.pid, &st, 0);
      ::close(j.lock_fd);
      try {
        db.release_lease(j.hash, me, host);
      } catch (const std::exception&) {  // a stale lease is taken over later
      }
    }
    running.clear();
  };
  try {
    while (true) {
      if (stop_requested() && !forwarded) {
        forwarded = true;
        progress.clear();
        if (!running.empty())
          std::printf("sweep '%s': %s, stopping %zu worker(s)\n", name.c_str(), stop_signal_name(), running.size());
        std::fflush(stdout);
        for (const Job& j : running) ::kill(j.pid, stop_signal());
      }
      while (!stop_requested() && static_cast<int>(running.size()) < std::max(1, opt.jobs) && !queue.empty()) {
        const size_t idx = queue.front();
        queue.pop_front();
        if (!start(idx)) held.push_back(idx);
      }
      if (running.empty() && (stop_requested() || (queue.empty() && held.empty()))) break;
      // Reap whatever finished; otherwise wait a little.
      int status = 0;
      const pid_t r = ::waitpid(-1, &status, WNOHANG);
      if (r < 0 && errno != EINTR && errno != ECHILD) throw Error("waiting for sweep workers failed");
      if (r > 0) {
        auto it = std::find_if(running.begin(), running.end(), [r](const Job& j) { return j.pid == r; });
        if (it != running.end()) finish(it, status);
        continue;
      }
      const double now = wall_seconds();
      if (now - last_beat >= kHeartbeatS) {
        last_beat = now;
        for (const Job& j : running)
          if (!db.refresh_lease(j.hash, me, host) && (progress.clear(), true))
            std::printf("warning: the lease of %s was taken over (no heartbeat for %.0f s); its folder stays locked\n",
                        describe(j.cell).c_str(), kLeaseStaleS);
      }
      if (!held.empty() && queue.empty() && now - last_retry >= kRetryHeldS) {
        last_retry = now;
        if (!announced_wait && running.empty() && !opt.quiet) {
          progress.clear();
          std::printf("sweep '%s': waiting for %zu cell(s) run by another process\n", name.c_str(), held.size());
          std::fflush(stdout);
          announced_wait = true;
        }
        for (size_t idx : held) queue.push_back(idx);
        held.clear();
        continue;
      }
      progress.tick(now, done);
      sleep_s(running.empty() ? kRetryHeldS / 4 : 0.1);
    }
  } catch (...) {
    progress.clear();
    abandon();
    throw;
  }
  progress.clear();
  sum.stop_signal = stop_signal();
  sum.wall_s = wall_seconds() - t0;
  if (sum.stop_signal)
    std::printf("sweep '%s': stopped by %s: %d completed, %d stopped, %d skipped, %d failed in %.1f s\n",
                name.c_str(), stop_signal_name(), sum.completed, sum.stopped, sum.skipped, sum.failed, sum.wall_s);
  else
    std::printf("sweep '%s': %d completed, %d skipped, %d failed in %.1f s\n", name.c_str(), sum.completed,
                sum.skipped, sum.failed, sum.wall_s);
  std::fflush(stdout);
  return sum;
}

}  // namespace mnemo
