#include "engine/training/flops.h"

#include <algorithm>

#include "runtime/registry.h"

namespace mnemo {

const std::string& flops_formula() {
  static const std::string f =
      "forward FLOPs per token = 2·N + Σ_layers f_mixer, training FLOPs = 3·D·forward; N = parameters that multiply "
      "activations (tied embedding counted once, an untied input embedding not), D = tokens; f_mixer as each family "
      "registers it, averaged over the token positions: attention 4·K·d (K = keys attended: t+1 causal, min(t+1, W) "
      "windowed, (t mod S)+1 in segments), chunked recurrences 2·C·d + 4·d·d_h (chunk C; decode 4·d·d_h), deep "
      "memories + 16·E·d·d_h (memory MLP width E·d_h: read + inner gradient step)";
  return f;
}

double mixer_flops_per_token(const ModelConfig& cfg, int64_t layer_index, int64_t first_position, int64_t positions,
                             bool decode) {
  const json args = cfg.layer_args(layer_index);
  const MixerFamily& family = Registry::instance().mixer(cfg.layer_mixers().at(size_t(layer_index)));
  const int64_t own_heads = args.contains("num_heads") && args["num_heads"].is_number_integer()
                                ? args["num_heads"].get<int64_t>()
                                : 0;
  const double heads = double(std::max<int64_t>(1, own_heads > 0 ? own_heads : cfg.n_heads));
  const MixingFlopsQuery query{args, double(cfg.d_model), double(cfg.d_model) / heads, first_position, positions,
                               decode};
  return family.traits.mixing_flops(query);
}

double matmul_parameters(const ModelConfig& cfg, int64_t n_params) {
  double n = double(n_params);
  if (!cfg.tie_embeddings) n -= double(cfg.vocab_size) * double(cfg.d_model);
  return n;
}

double forward_flops_per_token(const ModelConfig& cfg, int64_t n_params, int64_t first_position, int64_t positions,
                               bool decode) {
  double mixing = 0;
  for (int64_t i = 0; i < cfg.n_layers; ++i) mixing += mixer_flops_per_token(cfg, i, first_position, positions, decode);
  return 2 * matmul_parameters(cfg, n_params) + mixing;
}

double training_flops(const ModelConfig& cfg, int64_t n_params, int64_t tokens, int64_t context) {
  return 3.0 * double(tokens) * forward_flops_per_token(cfg, n_params, 0, context);
}

}  // namespace mnemo
