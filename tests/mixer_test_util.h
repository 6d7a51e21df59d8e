// Helpers for mixer-level tests: build a registered mixer in fp64, and run it prefill + token by token.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/registry.h"

namespace mnemo::test {

// The registered mixer `family` with its defaults updated by `args`, in float64.
inline std::shared_ptr<Mixer> make_mixer(const std::string& family, int64_t d_model, int64_t n_heads,
                                         const json& args) {
  const auto& fam = Registry::instance().mixer(family);
  MixerContext ctx;
  ctx.d_model = d_model;
  ctx.n_heads = n_heads;
  ctx.n_layers = 1;
  ctx.args = fam.defaults;
  ctx.args.update(args);
  auto m = fam.make(ctx);
  m->to(torch::kFloat64);
  return m;
}

// The first `prefill` tokens in one call with a fresh state, then one token per call: to compare with the
// stateless full forward (decode == forward).
inline torch::Tensor prefill_decode(Mixer& m, const torch::Tensor& x, int64_t prefill) {
  LayerState state;
  std::vector<torch::Tensor> pieces;
  if (prefill > 0) pieces.push_back(m.forward(x.narrow(1, 0, prefill), &state));
  for (int64_t t = prefill; t < x.size(1); ++t) pieces.push_back(m.forward(x.narrow(1, t, 1), &state));
  return torch::cat(pieces, 1);
}

}  // namespace mnemo::test
