// FLOP estimates, one formula for bench, the training runs' FLOP count (the report's FLOP axes) and MFU:
//   forward FLOPs per token = 2·N + Σ_layers f_mixer
//   training FLOPs          = 3 · D · forward FLOPs per token (backward = 2× forward)
// N = the parameters that multiply activations (a tied embedding counted once, as the LM head; an untied input
// embedding is a lookup, not counted), D = training tokens, f_mixer = the layer's mixer's token-mixing FLOPs per
// token as its family registers them (runtime/mixing_flops.h: attention 4·K·d, chunked recurrences 2·C·d + 4·d·d_h,
// deep memories + 16·E·d·d_h), averaged over the positions the tokens sit at.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/model.h"

namespace mnemo {

// Token-mixing FLOPs per token of one layer, averaged over positions [first_position, first_position + positions);
// `decode`: one token at a time from the carried state.
double mixer_flops_per_token(const ModelConfig& cfg, int64_t layer_index, int64_t first_position, int64_t positions,
                             bool decode = false);
// Parameters that multiply activations (N above) of a model with `n_params` parameters.
double matmul_parameters(const ModelConfig& cfg, int64_t n_params);
// 2·N + Σ_layers f_mixer over positions [first_position, first_position + positions).
double forward_flops_per_token(const ModelConfig& cfg, int64_t n_params, int64_t first_position, int64_t positions,
                               bool decode = false);
// A training run of `tokens` tokens at context `context`: 3 · tokens · forward_flops_per_token(positions 0..context).
double training_flops(const ModelConfig& cfg, int64_t n_params, int64_t tokens, int64_t context);
const std::string& flops_formula();

}  // namespace mnemo
