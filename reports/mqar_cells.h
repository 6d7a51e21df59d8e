// MQAR results as Zoology reports them (spec tasks.md §7.2): each run's best test accuracy over
// its evaluations, then the maximum over the learning-rate sweep per (seq_len L, key-value pairs
// N_KV, model, d_model). Shared by the MQAR section and the papers'-claims section.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "results/db.h"

namespace mnemo {

struct MqarCell {
  double accuracy = 0;   // best test accuracy over evaluations and learning rates
  double best_lr = 0;    // NaN when the config has no lr
  int64_t best_run = 0;
  std::set<double> lrs;  // learning rates tried
  int runs = 0;
};

using MqarCellKey = std::tuple<int64_t, int64_t, std::string, int64_t>;  // L, N_KV, model, d_model

struct MqarCells {
  std::map<MqarCellKey, MqarCell> cells;
  std::vector<int64_t> missing_keys;  // MQAR runs whose config lacks d_model, seq_len or num_kv_pairs
  std::vector<int64_t> no_accuracy;   // MQAR runs without a finite test accuracy yet
};

// Reads every run of task "mqar" (optionally only those of one sweep name).
MqarCells mqar_cells(const ResultsDB& db, const std::string& only_sweep = "");

}  // namespace mnemo
