// Results-database fixtures shared by the report tests (tests/test_report*.cpp).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "results/db.h"

namespace mnemo::test {

// Two models x two d_model x one (L, N_KV), each at two learning rates; the better lr of each
// cell reaches `good`, the other 0.25.
inline void fill_mqar_runs(ResultsDB& db) {
  for (std::string model : {"transformer", "swa"})
    for (int d : {64, 128})
      for (double lr : {1e-3, 1e-2}) {
        RunInfo r;
        r.model = model;
        r.task = "mqar";
        json cfg = {{"model", model}, {"task", "mqar"}, {"d_model", d},        {"n_layers", 2},
                    {"seq_len", 64},  {"num_kv_pairs", 4}, {"lr", lr}};
        r.config_json = cfg.dump();
        r.config_hash = model + std::to_string(d) + std::to_string(lr);
        r.n_params = 1000 * d;
        int64_t id = db.create_run(r);
        double good = (model == "transformer" ? 0.9 : 0.6) + (d == 128 ? 0.05 : 0.0);
        double best = lr == 1e-3 ? good : 0.25;
        std::vector<MetricRow> rows;
        for (int step = 10; step <= 30; step += 10) {
          rows.push_back({id, step, "train", "loss", 3.0 / step, step * 0.1});
          rows.push_back({id, step, "train", "tokens_per_s", 5000.0, step * 0.1});
          rows.push_back({id, step, "test", "accuracy", best * step / 30.0, step * 0.1});
        }
        db.add_metrics(rows);
        db.set_run_last_step(id, 30);
        db.set_run_status(id, "completed");
      }
}

inline void fill_benches(ResultsDB& db) {
  for (std::string mode : {"fwd", "decode"})
    for (int64_t T : {128, 256}) {
      BenchRow b;
      b.model = "transformer";
      b.mode = mode;
      b.device = "cpu";
      b.dtype = "float32";
      b.host = "testhost";
      b.blas = "OpenBLAS";
      b.torch_version = "1.13.1";
      b.seq_len = T;
      b.batch = 1;
      b.d_model = 64;
      b.n_layers = 2;
      b.threads = 1;
      b.repeats = 3;
      b.median_ms = T / 100.0;
      b.p20_ms = b.median_ms * 0.9;
      b.p80_ms = b.median_ms * 1.1;
      b.tokens_per_s = (mode == "decode" ? 1.0 : double(T)) / (b.median_ms / 1e3);
      b.peak_mem_mb = T / 10.0;
      b.gflops = 1.5;
      b.config_json = mode == "decode" ? R"({"state_bytes": 131072, "prefill_ms": 2.5})" : "{}";
      db.add_bench(b);
    }
}

// One MQAR run per family x d_model (vocab_size 256: 128 value tokens, chance 1/128), accuracy rising
// with d_model and differing by family; each run logs train/test loss and test accuracy.
// `sweep`: the sweep the runs are recorded under ("quickstart..." makes the report describe the quickstart).
inline void fill_mqar_families(ResultsDB& db, const std::vector<std::string>& families,
                               const std::vector<int>& dims = {32, 64}, const std::string& sweep = "") {
  int k = 0;
  for (const std::string& model : families) {
    ++k;
    for (int d : dims) {
      RunInfo r;
      r.model = model;
      r.task = "mqar";
      json cfg = {{"model", model}, {"task", "mqar"},      {"d_model", d},       {"n_layers", 2},
                  {"seq_len", 32},  {"num_kv_pairs", 4}, {"vocab_size", 256}, {"lr", 3e-3}};
      r.config_json = cfg.dump();
      r.config_hash = "fam_" + model + std::to_string(d);
      r.sweep = sweep;
      r.n_params = 1000 * d;
      int64_t id = db.create_run(r);
      const double acc = std::min(1.0, 0.05 * k + d / 128.0);
      std::vector<MetricRow> rows;
      for (int step = 10; step <= 40; step += 10) {
        rows.push_back({id, step, "train", "loss", 6.0 / (step * step) * 10 / k, step * 0.1});
        rows.push_back({id, step, "test", "loss", 7.0 / (step * step) * 10 / k, step * 0.1});
        rows.push_back({id, step, "test", "accuracy", acc * step / 40.0, step * 0.1});
      }
      db.add_metrics(rows);
      db.set_run_last_step(id, 40);
      db.set_run_status(id, "completed");
    }
  }
}

}  // namespace mnemo::test
