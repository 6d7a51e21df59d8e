// The Continuum Memory System block (runtime/hope/cms.h).
#include "runtime/hope/cms.h"

#include <cmath>
#include <string>

#include "core/common.h"
#include "runtime/hope/hope.h"
#include "runtime/layers.h"

namespace mnemo {

void check_cms_options(const CmsOptions& o) {
  if (o.chunk_sizes.empty()) throw Error("cms_chunk_sizes must list at least one level, got []");
  for (int64_t c : o.chunk_sizes)
    if (c < 0) throw Error("cms_chunk_sizes: every chunk size must be >= 0 (0 = never updated), got " + std::to_string(c));
  if (!(o.hidden_ratio > 0) || std::llround(o.d_model * o.hidden_ratio) < 1)
    throw Error("cms_hidden_ratio must give a hidden size >= 1, got " + std::to_string(o.hidden_ratio));
  if (!(o.lr >= 0) || !std::isfinite(o.lr)) throw Error("cms_lr must be finite and >= 0, got " + std::to_string(o.lr));
}

ContinuumMemoryImpl::ContinuumMemoryImpl(const CmsOptions& o) : options(o) {
  check_cms_options(o);
  const int64_t d = o.d_model;
  hidden = std::llround(d * o.hidden_ratio);
  for (size_t l = 0; l < o.chunk_sizes.size(); ++l) {
    const std::string name = "level" + std::to_string(l);
    // The residual branch starts small (std 0.02, as the projections of the other blocks' init).
    w1.push_back(register_parameter(name + "_w1", torch::randn({hidden, d}) * 0.02));
    w2.push_back(register_parameter(name + "_w2", torch::randn({d, hidden}) * 0.02));
    // W_v starts as the identity: the first in-context steps pull the branch towards zero instead of towards a random
    // projection of the input (which cost MQAR accuracy 0.13 -> 0.03 at cms_lr 1, docs/models.md#continuum-memory-system).
    target.push_back(register_module(name + "_target", make_linear(d, d)));
    {
      torch::NoGradGuard no_grad;
      target.back()->weight.copy_(torch::eye(d));
    }
    rate.push_back(register_module(name + "_rate", make_linear(d, 1, /*bias=*/true)));
  }
}

torch::Tensor ContinuumMemoryImpl::forward(const torch::Tensor& n, LayerState* state) {
  const int64_t T = n.size(1), offset = state ? state->pos : 0;
  torch::Tensor x = n;
  for (size_t l = 0; l < w1.size(); ++l) {
    const int64_t C = options.chunk_sizes[l];
    const std::string key = "cms" + std::to_string(l) + ".";
    CmsLevelState st;
    if (state && C > 0 && state->has(key + "w1"))
      st = {state->at(key + "w1"), state->at(key + "w2"), state->at(key + "p1"), state->at(key + "p2")};
    const auto v = target[l](x);
    const auto eta = options.lr * torch::sigmoid(rate[l](x).squeeze(-1));
    const bool one_step = state != nullptr && T == 1;
    auto r = one_step ? cms_level_recurrent(x, v, eta, w1[l], w2[l], st, C, offset)
                      : cms_level_chunk(x, v, eta, w1[l], w2[l], st, C, offset);
    if (state && C > 0) {
      state->tensors[key + "w1"] = r.state.w1.detach();
      state->tensors[key + "w2"] = r.state.w2.detach();
      state->tensors[key + "p1"] = r.state.p1.detach();
      state->tensors[key + "p2"] = r.state.p2.detach();
    }
    x = r.y;
  }
  return x - n;
}

}  // namespace mnemo
