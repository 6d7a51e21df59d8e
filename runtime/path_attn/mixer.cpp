// `path_attn` mixer: PaTH attention (docs/models.md#path-attention; arXiv 2505.16381 §3, with flash-linear-attention's
// PaTHAttention layer for the parameterisation, so that its checkpoints import):
//   q = x W_q, k = x W_k, v = x W_v (per head, no bias), no RoPE (the Householder products are the position encoding)
//   w = l2norm(SiLU(Conv3(x W_w))) per head; W_w = W_w2 W_w1 of rank 32 with use_low_rank_w (fla's choice), the
//       short conv with use_w_shortconv (kernel conv_size, no bias)
//   β = 2 σ(x w_β + b_β) per head, in (0, 2): H_t = I − β_t w_t w_tᵀ may reflect (a negative eigenvalue)
//   with use_forget_gate (PaTH-FoX): log f = logsigmoid(x w_f + b_f) per head, c_t = Σ_{s<=t} log f_s
//   o = path_attention(q, k, v, w, β, c) with scale d_h^-1/2 (runtime/path_attn/path_attn.h), out = W_o(o)
// Decode state: "k" [B, T, H, D] every key transformed through the last position, "v" [B, T, H, D], "c" [B, T, H]
// with the gate, and the w conv's cache "conv_w": a KV cache that grows with the context, as attention's does.
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/kernels/precision.h"
#include "runtime/layers.h"
#include "runtime/mixing_flops.h"
#include "runtime/path_attn/fla_names.h"
#include "runtime/path_attn/path_attn.h"
#include "runtime/registry.h"

namespace mnemo {

struct PathAttnArgs {
  bool use_forget_gate = false;  // PaTH-FoX: FoX's data-dependent forget gate on the logits
  bool use_low_rank_w = true;    // w from a rank-32 factorised projection (fla's default), else a full d×d one
  bool use_w_shortconv = true;   // causal depthwise conv + SiLU on w before the l2 norm
  int64_t conv_size = 3;         // the w conv's kernel
  int64_t chunk_size = 64;       // query chunk of the chunked form (speed and memory only; the form is exact)
  std::string form = "chunk";    // "chunk" | "recurrent" (full forwards; a T == 1 decode step is recurrent)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PathAttnArgs, use_forget_gate, use_low_rank_w, use_w_shortconv,
                                                conv_size, chunk_size, form)

constexpr int64_t kPathAttnLowRank = 32;  // fla's rank of the factorised w projection

class PathAttnMixer : public Mixer {
 public:
  PathAttnMixer(const MixerContext& ctx, const PathAttnArgs& a) : args_(a) {
    check_kernel_form("path_attn", a.form, a.chunk_size);
    if (a.conv_size < 1) throw Error("path_attn: conv_size must be >= 1, got " + std::to_string(a.conv_size));
    H_ = ctx.n_heads;
    D_ = head_dim_of("path_attn", ctx.d_model, H_);
    const int64_t d = ctx.d_model;
    q_proj_ = register_module("q_proj", make_linear(d, d));
    k_proj_ = register_module("k_proj", make_linear(d, d));
    v_proj_ = register_module("v_proj", make_linear(d, d));
    if (a.use_low_rank_w) {
      w_down_ = register_module("w_down", make_linear(d, kPathAttnLowRank));
      w_up_ = register_module("w_up", make_linear(kPathAttnLowRank, d));
    } else {
      w_proj_ = register_module("w_proj", make_linear(d, d));
    }
    if (a.use_w_shortconv) w_conv_ = register_module("w_conv", ShortConv(d, a.conv_size, /*silu=*/true));
    bt_proj_ = register_module("bt_proj", make_linear(d, H_, /*bias=*/true));
    if (a.use_forget_gate) g_proj_ = register_module("g_proj", make_linear(d, H_, /*bias=*/true));
    o_proj_ = register_module("o_proj", make_linear(d, d));
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1);
    auto q = q_proj_(x).view({B, T, H_, D_}), k = k_proj_(x).view({B, T, H_, D_});
    auto v = v_proj_(x).view({B, T, H_, D_});
    auto w = args_.use_low_rank_w ? w_up_(w_down_(x)) : w_proj_(x);
    if (args_.use_w_shortconv) w = w_conv_(w, state, "conv_w");
    const auto dt = recurrence_dtype(x);
    w = l2norm(w.to(dt).view({B, T, H_, D_}));
    auto beta = 2.0 * torch::sigmoid(bt_proj_(x).to(dt));  // [B, T, H]
    torch::Tensor keys = k, values = v, c_new, c_keys;
    if (args_.use_forget_gate) {
      c_new = torch::log_sigmoid(g_proj_(x).to(dt)).cumsum(1);  // [B, T, H]
      c_keys = c_new;
    }
    if (state && state->has("k")) {
      keys = torch::cat({state->at("k").to(k.scalar_type()), k}, 1);
      values = torch::cat({state->at("v").to(v.scalar_type()), v}, 1);
      if (args_.use_forget_gate) {
        auto c_prev = state->at("c").to(dt);
        c_new = c_new + c_prev.narrow(1, c_prev.size(1) - 1, 1);  // continue the running sum
        c_keys = torch::cat({c_prev, c_new}, 1);
      }
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(D_));
    auto r = use_chunked_kernel(args_.form, state, T)
                 ? path_attention(q, keys, values, w, beta, c_new, c_keys, scale, args_.chunk_size)
                 : path_attention_recurrent(q, keys, values, w, beta, c_new, c_keys, scale);
    if (state) {
      state->tensors["k"] = r.keys.detach();
      state->tensors["v"] = values.detach();
      if (args_.use_forget_gate) state->tensors["c"] = c_keys.detach();
    }
    return o_proj_(r.o.to(x.scalar_type()).reshape({B, T, H_ * D_}));
  }

 private:
  PathAttnArgs args_;
  int64_t H_ = 0, D_ = 0;
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, w_down_{nullptr}, w_up_{nullptr},
      w_proj_{nullptr}, bt_proj_{nullptr}, g_proj_{nullptr}, o_proj_{nullptr};
  ShortConv w_conv_{nullptr};
};

// Attention's q·k and p·v (attention_flops) plus moving the key cache across each chunk (K ← K (I − Yᵀ W): a
// fraction d_h / (2·chunk) of that when d_h < 2·chunk, as many FLOPs again otherwise; counted as the latter) and the chunk's own UT transform and intra-chunk products (about 6 · chunk · d_model per token).
// A decode step: the cache's rank-one update (4 · keys · d_model) beside attention's.
static double path_attn_flops(const MixingFlopsQuery& q) {
  const double chunk = q.args.is_object() && q.args.contains("chunk_size") ? q.args["chunk_size"].get<double>() : 64.0;
  return 2 * attention_flops(q) + (q.decode ? 0.0 : 6 * chunk * q.d_model);
}

void register_path_attn_family(Registry& r) {
  r.add_mixer(make_mixer_family<PathAttnArgs, PathAttnMixer>(
      "path_attn",
      "PaTH attention: softmax attention with accumulated Householder transforms as position encoding "
      "(docs/models.md#path-attention)",
      {path_attn_flops, {"attention", "purple", {{"use_forget_gate", "forget gate"}}}, 2e-3, {path_attn_fla_names()},
       {{"use_forget_gate", "PaTH-FoX: the Forgetting Transformer's data-dependent forget gate on the logits"},
        {"use_low_rank_w", "w from a rank-32 factorised projection (fla's default), else a full d_model x d_model one"},
        {"use_w_shortconv", "causal depthwise convolution + SiLU on w before its l2 norm"},
        {"conv_size", "kernel width of the short convolution on w"},
        {"chunk_size", "query chunk of the chunked form (speed and memory only: the form is exact)"}}}));
}

}  // namespace mnemo
