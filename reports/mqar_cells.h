// MQAR results as Zoology reports them (docs/tasks.md#mqar): each run's best test accuracy over
// its evaluations, then the maximum over the learning-rate sweep per (seq_len L, key-value pairs
// N_KV, model, d_model). A run trained on Zoology's mixture (task parameter test_num_kv_pairs)
// gives one cell per test slice, from its test metrics accuracy_nkv<N>. Shared by the MQAR section
// and the papers'-claims section.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
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
  // (L, N_KV) -> the vocabulary sizes of its runs (the chance level is 1 / (V - V/2)).
  std::map<std::pair<int64_t, int64_t>, std::set<int64_t>> vocab_sizes;
};

// Reads every run of task "mqar" (optionally only those of one sweep name).
MqarCells mqar_cells(const ResultsDB& db, const std::string& only_sweep = "");

}  // namespace mnemo
