// A whole language model of a registered family at a small size, for tests that train or trace one.
#pragma once
#include <string>

#include "engine/tools/bench.h"
#include "runtime/model.h"

namespace mnemo::test {

// `family` with `mnemo bench`'s defaults for everything else: d_model, 2 layers, 2 heads, vocabulary `vocab`, the
// parameters drawn after torch::manual_seed(seed).
inline LanguageModel small_model(const std::string& family, int64_t d_model, int64_t vocab, uint64_t seed) {
  BenchOptions opt;
  opt.model = family;
  opt.d_model = d_model;
  opt.n_layers = 2;
  opt.n_heads = 2;
  opt.vocab_size = vocab;
  torch::manual_seed(seed);
  return LanguageModel(model_config_from_json(bench_model_config(opt)));
}

}  // namespace mnemo::test
