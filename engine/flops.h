// Training-FLOPs estimate of a language-model run (docs/tasks.md#language-modelling), for the scaling curves:
//   FLOPs = 6·N·D + 3·D·Σ_layers f_mixer(T)
// N = parameters (a tied embedding counted once: the LM head's matmul), D = training tokens, T = context,
// f_mixer = forward FLOPs per token of the mixer beyond its projections (d = d_model, d_h = head dim):
//   attention 4·K·d with K the keys a token attends on average ((T+1)/2 causal, min(W, (T+1)/2) in a window
//   of W, segment/2 in a segment); chunked recurrences 2·C·d + 4·d·d_h (chunk or mini-batch C); deep memories
//   add 16·E·d·d_h (the memory MLP of width E·d_h read once and its inner gradient step, 3× a forward).
#pragma once
#include <cstdint>
#include <string>

#include "runtime/model.h"

namespace mnemo {

double mixer_flops_per_token(const ModelConfig& cfg, int64_t layer_index, int64_t context);
double training_flops(const ModelConfig& cfg, int64_t n_params, int64_t tokens, int64_t context);
const std::string& flops_formula();

}  // namespace mnemo
