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
    for (const json& value : it.value())
      if (value.is_object() && !value.contains(it.key()))
        throw Error("sweep grid key '" + it.key() + "': an object value is merged into the cell and must set '" +
                    it.key() + "' itself, got " + value.dump());
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
      for (size_t a = 0; a < axes.size(); ++a) {
        const json& value = axes[a].second[idx[a]];
        if (value.is_object())
          cell.update(value);  // a value with its own settings, e.g. {"model": "mamba3", "mamba_mimo_rank": 4}
        else
          cell[axes[a].first] = value;
      }
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

// The keys whose values differ between a sweep's cells (a key that some cells lack counts): what sets a cell apart
// from the others, e.g. "mamba_mimo_rank" of a grid value {"model": "mamba3", "mamba_mimo_rank": 4}.
std::set<std::string> varied_keys(const std::vector<json>& cells) {
  std::set<std::string> keys, varied;
  for (const json& c : cells)
    for (auto it = c.begin(); it != c.end(); ++it) keys.insert(it.key());
  for (const std::string& k : keys)
    for (const json& c : cells)
      if (!c.contains(k) || !cells.front().contains(k) || c[k] != cells.front()[k]) {
        varied.insert(k);
        break;
      }
  return varied;
}

// A cell's line in the sweep's progress: model, task, the shape and rate keys, and every other key the sweep varies.
std::string describe(const json& cell, const std::set<std::string>& varied) {
  std::string s = cell.value("model", "?") + " " + cell.value("task", "?");
  // An MQAR mixture trains on train_num_kv_pairs: its num_kv_pairs is not what the run trains on.
  const bool mixture = cell.contains("train_num_kv_pairs") && cell["train_num_kv_pairs"].is_array() &&
                       !cell["train_num_kv_pairs"].empty();
  for (auto it = cell.begin(); it != cell.end(); ++it) {
    const std::string& k = it.key();
    const bool shown = k == "d_model" || k == "lr" || k == "seq_len" || (k == "num_kv_pairs" && !mixture) ||
                       (k == "train_num_kv_pairs" && mixture) ||
                       (varied.count(k) && k != "model" && k != "task" && k != "num_kv_pairs");
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

// The cells of this shard: round robin, so the shards are disjoint, cover the grid and differ by one cell at most.
std::vector<json> shard_cells(std::vector<json> cells, const SweepOptions& opt, const std::string& name) {
  if (opt.shard_count < 1 || opt.shard_index < 0 || opt.shard_index >= opt.shard_count)
    throw Error("sweep: shard " + std::to_string(opt.shard_index) + "/" + std::to_string(opt.shard_count) +
                " is out of range");
  if (opt.shard_count == 1) return cells;
  std::vector<json> mine;
  for (size_t c = 0; c < cells.size(); ++c)
    if (static_cast<int>(c % static_cast<size_t>(opt.shard_count)) == opt.shard_index) mine.push_back(cells[c]);
  std::printf("sweep '%s': shard %d/%d holds %zu of the grid's %zu cells\n", name.c_str(), opt.shard_index,
              opt.shard_count, mine.size(), cells.size());
  return mine;
}

// A worker: `mnemo train` of one cell in its folder, its output appended to <out_dir>/train.log, in its own process
// group (a terminal's Ctrl-C reaches the sweep alone, which forwards it once to every worker), with the sweep's
// thread budget and the folder's lock inherited. Returns its pid.
pid_t spawn_worker(const std::string& self, const std::vector<std::string>& args, int threads, int lock_fd,
                   const std::string& log) {
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  // Environment: this process's, with the thread budget split between workers.
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("MNEMO_THREADS=", 0) != 0 && std::string(*e).rfind("OMP_NUM_THREADS=", 0) != 0 &&
        std::string(*e).rfind("MNEMO_RUN_LOCK_FD=", 0) != 0)
      env_store.emplace_back(*e);
  env_store.push_back("MNEMO_THREADS=" + std::to_string(threads));
  env_store.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  // The worker's inherited descriptor of <out_dir>/.lock, already locked for it (a trainer that
  // locks its folder itself must not lock it a second time through another descriptor).
  env_store.push_back("MNEMO_RUN_LOCK_FD=" + std::to_string(lock_fd));
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(const_cast<char*>(s.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  // The worker inherits the folder lock (this fd alone loses close-on-exec while it starts).
  ::fcntl(lock_fd, F_SETFD, 0);
  pid_t pid;
  const int rc = posix_spawn(&pid, self.c_str(), &fa, &attr, argv.data(), envp.data());
  ::fcntl(lock_fd, F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw Error("cannot start worker process " + self + ": " + std::strerror(rc));
  return pid;
}

// One invocation of a sweep: its workers, the cells to claim and to try again, the leases and the progress.
class SweepRunner {
 public:
  SweepRunner(std::string name, std::vector<std::pair<json, std::string>> todo, std::set<std::string> varied,
              std::string out_root, const SweepOptions& opt, ResultsDB& db, SweepSummary& sum)
      : name_(std::move(name)), todo_(std::move(todo)), varied_(std::move(varied)), out_root_(std::move(out_root)),
        opt_(opt), db_(db), sum_(sum),
        // The threads this process was given ($MNEMO_THREADS / $OMP_NUM_THREADS, else the cores), shared
        // between the workers: oversubscribed OpenMP threads spin and collapse throughput.
        threads_per_job_(std::max(1, at::get_num_threads() / std::max(1, opt.jobs))),
        self_(fs::read_symlink("/proc/self/exe").string()), me_(static_cast<int64_t>(::getpid())),
        host_(hostname()),
        // Each running cell's progress (its worker's train.log) and the sweep's total, live on a terminal.
        progress_(name_, static_cast<int>(todo_.size()), std::max(1, opt.jobs),
                  !opt.quiet && (opt.live_progress < 0 ? SweepProgress::stdout_is_terminal() : opt.live_progress > 0),
                  opt.quiet ? 0.0 : opt.progress_every_s) {
    for (size_t i = 0; i < todo_.size(); ++i) queue_.push_back(i);
  }

  // Runs the cells until each is done, failed or held by another process that finished it; on a stop request,
  // forwards the signal once to every worker and waits for them. On an error the workers are stopped first.
  void run() {
    try {
      loop();
    } catch (...) {
      progress_.clear();
      abandon();
      throw;
    }
    progress_.clear();
  }

 private:
  void loop() {
    double last_beat = wall_seconds(), last_retry = wall_seconds();
    while (true) {
      if (stop_requested() && !forwarded_) forward_stop();
      while (!stop_requested() && static_cast<int>(running_.size()) < std::max(1, opt_.jobs) && !queue_.empty()) {
        const size_t idx = queue_.front();
        queue_.pop_front();
        if (!start(idx)) held_.push_back(idx);
      }
      if (running_.empty() && (stop_requested() || (queue_.empty() && held_.empty()))) break;
      // Reap whatever finished; otherwise wait a little.
      int status = 0;
      const pid_t r = ::waitpid(-1, &status, WNOHANG);
      if (r < 0 && errno != EINTR && errno != ECHILD) throw Error("waiting for sweep workers failed");
      if (r > 0) {
        auto it = std::find_if(running_.begin(), running_.end(), [r](const Job& j) { return j.pid == r; });
        if (it != running_.end()) finish(it, status);
        continue;
      }
      const double now = wall_seconds();
      if (now - last_beat >= kHeartbeatS) {
        last_beat = now;
        refresh_leases();
      }
      if (!held_.empty() && queue_.empty() && now - last_retry >= kRetryHeldS) {
        last_retry = now;
        retry_held();
        continue;
      }
      progress_.tick(now, done_);
      sleep_s(running_.empty() ? kRetryHeldS / 4 : 0.1);
    }
  }

  void forward_stop() {
    forwarded_ = true;
    progress_.clear();
    if (!running_.empty())
      std::printf("sweep '%s': %s, stopping %zu worker(s)\n", name_.c_str(), stop_signal_name(), running_.size());
    std::fflush(stdout);
    for (const Job& j : running_) ::kill(j.pid, stop_signal());
  }

  // Claims the cell, locks its folder and starts its worker; false if another process has it.
  bool start(size_t idx) {
    const auto& [cell, hash] = todo_[idx];
    const LeaseClaim claim = db_.claim_cell(hash, name_, me_, host_, kLeaseStaleS);
    if (claim == LeaseClaim::completed) {
      progress_.clear();
      ++done_;
      ++sum_.skipped;
      std::printf("[%d/%zu] skip   %s (completed by another worker)\n", done_, todo_.size(),
                  describe(cell, varied_).c_str());
      std::fflush(stdout);
      return true;
    }
    if (claim == LeaseClaim::held) return false;
    // One folder per cell (its config hash); only the lock holder writes in it.
    const std::string out_dir = (fs::path(out_root_) / (cell.value("model", "model") + "-" + hash)).string();
    fs::create_directories(out_dir);
    std::string holder;
    const int lock_fd = lock_run_folder(out_dir, holder);
    if (lock_fd < 0) {  // e.g. the worker of a sweep that was killed still trains there
      db_.release_lease(hash, me_, host_);
      if (!opt_.quiet && warned_locked_.insert(idx).second && (progress_.clear(), true))
        std::printf("  %s: %s is in use by process %s; waiting\n", describe(cell, varied_).c_str(), out_dir.c_str(),
                    holder.c_str());
      return false;
    }
    try {
      const std::string cfg_file = (fs::path(out_dir) / "cell.json").string();
      write_file_atomic(cfg_file, cell.dump(2));  // checked: a cell never starts from a truncated config
      std::vector<std::string> args = {self_, "train", "--config", cfg_file, "--db", opt_.db_path, "--out", out_dir,
                                       "--sweep", name_};
      if (has_checkpoint(out_dir)) args.push_back("--resume");  // a stopped or crashed run of this cell
      if (!opt_.device.empty()) {
        args.push_back("--device");
        args.push_back(opt_.device);
      }
      // The worker's progress lines and its summary, appended after those of earlier attempts at the cell.
      const std::string log = (fs::path(out_dir) / "train.log").string();
      std::error_code size_error;
      const auto log_size = fs::exists(log) ? fs::file_size(log, size_error) : 0;
      const pid_t pid = spawn_worker(self_, args, threads_per_job_, lock_fd, log);
      running_.push_back({pid, cell, hash, out_dir, wall_seconds(), lock_fd});
      const std::string model = cell.value("model", "?"), label = describe(cell, varied_);
      progress_.started(pid, model, label.rfind(model + " ", 0) == 0 ? label.substr(model.size() + 1) : label, log,
                        size_error ? 0 : static_cast<long long>(log_size), wall_seconds());
    } catch (...) {
      ::close(lock_fd);
      db_.release_lease(hash, me_, host_);
      throw;
    }
    return true;
  }

  // A finished worker: report it, unlock its folder, give its cell back.
  void finish(std::vector<Job>::iterator it, int status) {
    ++done_;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    const bool stopped = stop_requested() &&
                         ((WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM)) ||
                          (WIFEXITED(status) && (WEXITSTATUS(status) == 130 || WEXITSTATUS(status) == 143)));
    std::string log = (fs::path(it->out_dir) / "train.log").string();
    std::string tail = last_line(log);
    progress_.clear();
    progress_.finished(it->pid, wall_seconds(), ok);
    if (ok) {
      ++sum_.completed;
      const auto [metric, value] = best_metric(tail);
      std::printf("[%d/%zu] done   %s  best %s %s  (%.1f s)\n", done_, todo_.size(),
                  describe(it->cell, varied_).c_str(), metric.c_str(), value.c_str(), wall_seconds() - it->start);
    } else if (stopped) {
      ++sum_.stopped;
      std::printf("[%d/%zu] stopped %s (%s; a re-run resumes it)\n", done_, todo_.size(),
                  describe(it->cell, varied_).c_str(), stop_signal_name());
    } else {
      ++sum_.failed;
      // A worker killed by a signal wrote no error line of its own: say which signal (SIGKILL is what the kernel's
      // out-of-memory killer sends), then its last line.
      if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        tail = "the worker was killed by signal " + std::to_string(sig) +
               (sig == SIGKILL ? " (SIGKILL: out of memory, or killed from outside)" : "") + "; its last line: " + tail;
      }
      sum_.failures.push_back(describe(it->cell, varied_) + ": " + tail + " (log: " + log + ")");
      std::printf("[%d/%zu] FAILED %s: %s\n", done_, todo_.size(), describe(it->cell, varied_).c_str(), tail.c_str());
    }
    std::fflush(stdout);
    ::close(it->lock_fd);
    db_.release_lease(it->hash, me_, host_);
    running_.erase(it);
  }

  // The run's primary held-out metric from train's summary line: best test accuracy, or e.g. best val ppl.
  static std::pair<std::string, std::string> best_metric(const std::string& summary_line) {
    std::string metric = "test acc", value = "n/a";
    try {
      const json j = json::parse(summary_line);
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
    return {metric, value};
  }

  void refresh_leases() {
    for (const Job& j : running_)
      if (!db_.refresh_lease(j.hash, me_, host_) && (progress_.clear(), true))
        std::printf("warning: the lease of %s was taken over (no heartbeat for %.0f s); its folder stays locked\n",
                    describe(j.cell, varied_).c_str(), kLeaseStaleS);
  }

  // Cells another process runs go back in the queue, to be claimed once that process lets go.
  void retry_held() {
    if (!announced_wait_ && running_.empty() && !opt_.quiet) {
      progress_.clear();
      std::printf("sweep '%s': waiting for %zu cell(s) run by another process\n", name_.c_str(), held_.size());
      std::fflush(stdout);
      announced_wait_ = true;
    }
    for (size_t idx : held_) queue_.push_back(idx);
    held_.clear();
  }

  // On an error (e.g. the DB), the workers are stopped and waited for, and their cells given back.
  void abandon() {
    for (const Job& j : running_) ::kill(j.pid, SIGTERM);
    for (const Job& j : running_) {
      int st = 0;
      ::waitpid(j.pid, &st, 0);
      ::close(j.lock_fd);
      try {
        db_.release_lease(j.hash, me_, host_);
      } catch (const std::exception&) {  // a stale lease is taken over later
      }
    }
    running_.clear();
  }

  const std::string name_;
  const std::vector<std::pair<json, std::string>> todo_;  // (cell, config hash), in the grid's order
  const std::set<std::string> varied_;  // the keys the whole grid varies (varied_keys), named in every cell's line
  const std::string out_root_;
  const SweepOptions& opt_;
  ResultsDB& db_;
  SweepSummary& sum_;
  const int threads_per_job_;
  const std::string self_;
  const int64_t me_;
  const std::string host_;
  SweepProgress progress_;
  std::vector<Job> running_;
  std::deque<size_t> queue_;       // cells to claim, in order
  std::vector<size_t> held_;       // cells another process is running: tried again every kRetryHeldS
  std::set<size_t> warned_locked_;  // cells whose folder was found locked (said once)
  int done_ = 0;
  bool forwarded_ = false, announced_wait_ = false;
};

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
  std::vector<json> grid = expand_sweep(sweep);  // validates the file's shape first (an array, null, a non-string name)
  std::set<std::string> varied = varied_keys(grid);  // over the whole grid: a cell reads the same in every shard
  const std::string name = sweep.value("name", "sweep");
  const std::vector<json> cells = shard_cells(std::move(grid), opt, name);
  const std::string out_root = opt.out_root.empty() ? std::string(kDefaultRunsDir) + "/sweep-" + name : opt.out_root;
  install_stop_handlers();
  // Resolve everything first: a bad cell fails the sweep before any run starts; completed cells are skipped.
  std::vector<std::pair<json, std::string>> todo;
  SweepSummary sum;
  sum.total = static_cast<int>(cells.size());
  ResultsDB db(opt.db_path);
  rehash_runs_if_old(db);
  for (const auto& c : cells) {
    const std::string hash = config_hash(resolve_run_config(c));
    if (db.completed_run_with_hash(hash)) {
      ++sum.skipped;
      continue;
    }
    todo.emplace_back(c, hash);
  }
  std::printf("sweep '%s': %d cells, %d already completed, %zu to run with %d worker(s)\n", name.c_str(),
              sum.total, sum.skipped, todo.size(), opt.jobs);
  std::fflush(stdout);
  const double t0 = wall_seconds();
  SweepRunner(name, std::move(todo), std::move(varied), out_root, opt, db, sum).run();

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
