#include "engine/flops.h"

#include <algorithm>

namespace mnemo {

const std::string& flops_formula() {
  static const std::string f =
      "FLOPs = 6·N·D + 3·D·Σ_layers f_mixer(T); N = parameters (tied embedding counted once), D = training tokens, "
      "T = context; f_mixer per token: attention 4·K·d (K = (T+1)/2 causal, min(W,(T+1)/2) windowed, segment/2 "
      "for MAC), chunked recurrences 2·C·d + 4·d·d_h (chunk C), deep memories + 16·E·d·d_h (memory MLP width E·d_h: "
      "read + inner gradient step)";
  return f;
}

double mixer_flops_per_token(const ModelConfig& cfg, int64_t layer_index, int64_t context) {
  const json a = cfg.layer_args(layer_index);
  const std::string mixer = cfg.layer_mixers().at(size_t(layer_index));
  const double d = double(cfg.d_model), T = double(context);
  const double heads = a.contains("num_heads") && a["num_heads"].get<int64_t>() > 0 ? a["num_heads"].get<double>()
                                                                                    : double(cfg.n_heads);
  const double dh = d / std::max(1.0, heads);
  double f = 0;
  const bool attention = mixer == "transformer" || mixer == "swa" || a.contains("window") || a.contains("segment_size");
  if (attention) {
    double keys = (T + 1) / 2;
    if (a.contains("window")) keys = std::min(a["window"].get<double>(), keys);
    if (a.contains("segment_size")) keys = std::min(a["segment_size"].get<double>() / 2, keys);
    f += 4 * keys * d;
  }
  const bool recurrent = mixer != "transformer" && mixer != "swa";
  if (recurrent) {
    double C = 64;
    if (a.contains("chunk_size")) C = a["chunk_size"].get<double>();
    if (a.contains("mini_batch")) C = a["mini_batch"].get<double>();
    f += 2 * C * d + 4 * d * dh;
    const bool deep = a.contains("memory_depth") || a.contains("memory") || mixer == "ttt_mlp" || mixer == "moneta" ||
                      mixer == "yaad" || mixer == "memora";
    if (deep && a.contains("expansion")) f += 16 * a["expansion"].get<double>() * d * dh;
  }
  return f;
}

double training_flops(const ModelConfig& cfg, int64_t n_params, int64_t tokens, int64_t context) {
  double mixer = 0;
  for (int64_t i = 0; i < cfg.n_layers; ++i) mixer += mixer_flops_per_token(cfg, i, context);
  return 6.0 * double(n_params) * double(tokens) + 3.0 * double(tokens) * mixer;
}

}  // namespace mnemo
