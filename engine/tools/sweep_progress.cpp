#include "engine/tools/sweep_progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace mnemo {

bool ProgressTail::poll() {
  std::ifstream f(path_, std::ios::binary);
  if (!f) return false;
  f.seekg(0, std::ios::end);
  const long long size = static_cast<long long>(f.tellg());
  if (size < offset_) {  // the file was replaced: read it again from the start
    offset_ = 0;
    partial_.clear();
  }
  if (size == offset_) return false;
  f.seekg(offset_);
  std::string chunk(static_cast<size_t>(size - offset_), '\0');
  f.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<size_t>(f.gcount()));
  offset_ += static_cast<long long>(chunk.size());
  partial_ += chunk;
  bool fresh = false;
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
    if (auto p = parse_train_progress(partial_.substr(start, nl - start))) {
      latest_ = std::move(p);
      fresh = true;
    }
  partial_.erase(0, start);
  return fresh;
}

std::string format_cell_status(const SweepCellStatus& c) {
  const std::string details = c.details.empty() ? "" : "  (" + c.details + ")";
  if (!c.progress) return "  " + c.model + ": starting, " + format_duration(c.elapsed_s) + details;
  const TrainProgress& p = *c.progress;
  char tail[96];
  std::snprintf(tail, sizeof tail, " | %.0f tok/s | ETA %s", p.tokens_per_s, format_duration(p.eta_s).c_str());
  return "  " + c.model + ": step " + std::to_string(p.step) + "/" + std::to_string(p.steps) + " | loss " +
         format_progress_number(p.loss) + " | " + p.held_name + " " +
         (std::isnan(p.held) ? std::string("-") : format_progress_number(p.held)) + tail + details;
}

std::string format_sweep_total(const std::string& name, int done, int total, int running, double elapsed_s,
                               std::optional<double> eta_s) {
  return "sweep '" + name + "': " + std::to_string(done) + "/" + std::to_string(total) + " cells done, " +
         std::to_string(running) + " running | " + format_duration(elapsed_s) + " elapsed | ETA " +
         (eta_s ? format_duration(*eta_s) : std::string("-"));
}

std::optional<double> sweep_eta(const std::vector<SweepCellStatus>& running, int queued, int jobs,
                                const std::vector<double>& finished_durations) {
  double mean_cell = 0;
  if (!finished_durations.empty()) {
    for (double d : finished_durations) mean_cell += d;
    mean_cell /= static_cast<double>(finished_durations.size());
  } else {
    int n = 0;
    for (const auto& c : running)
      if (c.progress && c.progress->step > 0) mean_cell += c.elapsed_s + c.progress->eta_s, ++n;
    if (n == 0) return std::nullopt;
    mean_cell /= n;
  }
  double work = static_cast<double>(std::max(0, queued)) * mean_cell, longest = 0;
  for (const auto& c : running) {
    // A cell without a progress line yet: a whole cell less what it has run.
    const double left = c.progress ? c.progress->eta_s : std::max(0.0, mean_cell - c.elapsed_s);
    work += left;
    longest = std::max(longest, left);
  }
  return std::max(longest, work / std::max(1, jobs));
}

SweepProgress::SweepProgress(std::string name, int total, int jobs, bool live, double every_s, std::FILE* out)
    : name_(std::move(name)), total_(total), jobs_(std::max(1, jobs)), live_(live), every_s_(every_s), out_(out) {}

SweepProgress::~SweepProgress() { clear(); }

bool SweepProgress::stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

int SweepProgress::terminal_width() {
  struct winsize ws {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    const int n = std::atoi(c);
    if (n > 0) return n;
  }
  return 80;
}

void SweepProgress::started(pid_t pid, const std::string& model, const std::string& details,
                            const std::string& log_path, long long log_offset, double now) {
  if (t0_ < 0) t0_ = now;
  cells_[pid] = Cell{model, details, now, ProgressTail(log_path, log_offset)};
}

void SweepProgress::finished(pid_t pid, double now, bool completed) {
  auto it = cells_.find(pid);
  if (it == cells_.end()) return;
  if (completed) finished_durations_.push_back(now - it->second.start);
  cells_.erase(it);
}

std::vector<std::string> SweepProgress::lines(double now, int done) const {
  std::vector<SweepCellStatus> running;
  for (const auto& [pid, c] : cells_) running.push_back({c.model, c.details, now - c.start, c.tail.latest()});
  std::vector<std::string> out;
  for (const auto& c : running) out.push_back(format_cell_status(c));
  const int queued = total_ - done - static_cast<int>(running.size());
  out.push_back(format_sweep_total(name_, done, total_, static_cast<int>(running.size()),
                                   now - (t0_ < 0 ? now : t0_), sweep_eta(running, queued, jobs_, finished_durations_)));
  return out;
}

void SweepProgress::clear() {
  if (!live_ || drawn_lines_ == 0) return;
  std::fprintf(out_, "\x1b[%dA\r\x1b[J", drawn_lines_);  // up to the block's first line, erase to the end
  std::fflush(out_);
  drawn_lines_ = 0;
}

void SweepProgress::tick(double now, int done) {
  if (t0_ < 0) t0_ = now;
  if (!live_ && every_s_ <= 0) return;
  const double period = live_ ? 1.0 : every_s_;  // a terminal is redrawn every second
  if (live_ ? (last_draw_ >= 0 && now - last_draw_ < period) : (now - (last_print_ < 0 ? t0_ : last_print_) < period))
    return;
  for (auto& [pid, c] : cells_) c.tail.poll();
  const std::vector<std::string> text = lines(now, done);
  if (live_) {
    last_draw_ = now;
    const size_t width = static_cast<size_t>(std::max(20, terminal_width() - 1));  // the last column would wrap
    std::string block = drawn_lines_ > 0 ? "\x1b[" + std::to_string(drawn_lines_) + "A\r\x1b[J" : std::string();
    for (const auto& l : text) block += (l.size() > width ? l.substr(0, width - 3) + "..." : l) + "\n";
    std::fwrite(block.data(), 1, block.size(), out_);
    drawn_lines_ = static_cast<int>(text.size());
  } else {
    last_print_ = now;
    for (const auto& l : text) std::fprintf(out_, "%s\n", l.c_str());
  }
  std::fflush(out_);
}

}  // namespace mnemo
