// A sweep's live progress: each running cell's latest progress line (read back from its worker's
// train.log, which the worker appends and flushes every log_every steps) and a total line.
// On a terminal the block is redrawn in place (ANSI cursor-up and erase, each line cut to the terminal's
// width); otherwise it is printed as plain lines every `every_s` seconds.
#pragma once
#include <sys/types.h>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/progress.h"

namespace mnemo {

// Reads a growing log file from where the last read stopped and keeps its newest progress line
// (whole lines only: a line still being written is read once complete).
class ProgressTail {
 public:
  ProgressTail() = default;
  ProgressTail(std::string path, long long start_offset) : path_(std::move(path)), offset_(start_offset) {}
  // Reads what was appended since the last call; true if a new progress line arrived.
  bool poll();
  const std::optional<TrainProgress>& latest() const { return latest_; }

 private:
  std::string path_, partial_;
  long long offset_ = 0;
  std::optional<TrainProgress> latest_;
};

// The block's lines, without any terminal control: one per running cell, then the total line.
// "  transformer: step 40/200 | loss 2.3100 | test accuracy 0.1250 | 5400 tok/s | ETA 2m05s  (mqar lr=0.001)":
// the numbers before the cell's details, so that a line cut to a terminal's width keeps them.
struct SweepCellStatus {
  std::string model;    // e.g. "transformer"
  std::string details;  // the rest of the cell's description, e.g. "mqar lr=0.001"
  double elapsed_s = 0;
  std::optional<TrainProgress> progress;
};
std::string format_cell_status(const SweepCellStatus& c);
// "sweep 'NAME': 2/6 cells done, 2 running | 4m10s elapsed | ETA 12m30s" (ETA "-" without an estimate).
std::string format_sweep_total(const std::string& name, int done, int total, int running, double elapsed_s,
                               std::optional<double> eta_s);
// The sweep's remaining time: each running cell's ETA and, for the cells still queued, the mean duration of
// the cells finished so far (else the running cells' projected durations), spread over `jobs` workers; it is
// never less than the longest running cell's ETA. nullopt while nothing is known.
std::optional<double> sweep_eta(const std::vector<SweepCellStatus>& running, int queued, int jobs,
                                const std::vector<double>& finished_durations);

class SweepProgress {
 public:
  // live: redraw in place (a terminal); else plain lines every every_s seconds (0: none).
  SweepProgress(std::string name, int total, int jobs, bool live, double every_s, std::FILE* out = stdout);
  ~SweepProgress();
  void started(pid_t pid, const std::string& model, const std::string& details, const std::string& log_path,
               long long log_offset, double now);
  void finished(pid_t pid, double now, bool completed);
  // Reads the workers' logs and redraws (live) or prints (at the interval); `done` counts every cell
  // accounted for (completed, failed, stopped, skipped).
  void tick(double now, int done);
  // Erases the live block so that a line can be printed above it (the next tick draws it again).
  void clear();

  static bool stdout_is_terminal();
  static int terminal_width();  // columns of stdout's terminal, else $COLUMNS, else 80

 private:
  struct Cell {
    std::string model, details;
    double start = 0;
    ProgressTail tail;
  };
  std::vector<std::string> lines(double now, int done) const;

  std::string name_;
  int total_, jobs_;
  bool live_;
  double every_s_;
  std::FILE* out_;
  std::map<pid_t, Cell> cells_;  // running, by worker pid
  std::vector<double> finished_durations_;
  double t0_ = -1, last_print_ = -1, last_draw_ = -1;
  int drawn_lines_ = 0;
};

}  // namespace mnemo
