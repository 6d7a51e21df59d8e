// `mesa_net` mixer: the Mesa layer (docs/models.md#mesanet; arXiv 2506.05233 §3, with flash-linear-attention's
// MesaNet layer for the parameterisation, so that its checkpoints import):
//   q = l2norm(SiLU(Conv4(x W_q))), k likewise, v = x W_v                                  (per head, no bias)
//   g = logsigmoid(x w_a + b_a),  β = σ(x w_b + b_b)                                       (one per head)
//   λ = softplus(λ_raw) + lambda_lower_bound per head and key channel, λ_raw = softplus⁻¹(1 − lower bound)
//   y = MesaNet kernel (runtime/mesa_net/mesa_net.h) with `cg_steps` CG steps, states in fp32
//   out = W_o concat_h(RMSNorm(y_h) ⊙ w)            or, with use_output_gate, W_o concat_h(RMSNorm(y_h) ⊙ w ⊙ SiLU((x W_g)_h))
// Decode state: "h_kk" [B, H, d, d], "h_kv" [B, H, d, d] and the conv caches "conv_q", "conv_k": O(1) in T.
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/kernels/precision.h"
#include "runtime/mesa_net/fla_names.h"
#include "runtime/mesa_net/mesa_net.h"
#include "runtime/no_weight_decay.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"

namespace mnemo {

struct MesaNetArgs {
  int64_t num_heads = 0;  // 0: the model's n_heads
  int64_t head_dim = 0;   // d (keys and values); 0: d_model / heads
  int64_t conv_size = 4;  // the short conv on q and k (always on, as in the reference layer)
  int64_t cg_steps = 30;  // CG steps per token, in the forward and in decoding alike
  double lambda_lower_bound = 0.25;
  bool use_output_gate = false;
  // Speed knob only (the chunk form is exact): training tokens/s at T 512 (mnemo bench --mode fwdbwd, d_model 128,
  // 4 heads, one thread) 455 at 64 and 523 at 32 in one comparison.
  int64_t chunk_size = 32;
  std::string form = "chunk";  // "chunk" | "recurrent" (full forwards; T == 1 decode is recurrent)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MesaNetArgs, num_heads, head_dim, conv_size, cg_steps,
                                                lambda_lower_bound, use_output_gate, chunk_size, form)

class MesaNetMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  MesaNetMixer(const MixerContext& ctx, const MesaNetArgs& a) : args_(a) {
    check_kernel_form("mesa_net", a.form, a.chunk_size);
    if (a.conv_size < 1) throw Error("mesa_net: conv_size must be >= 1, got " + std::to_string(a.conv_size));
    if (a.cg_steps < 1) throw Error("mesa_net: cg_steps must be >= 1, got " + std::to_string(a.cg_steps));
    if (!(a.lambda_lower_bound >= 0 && a.lambda_lower_bound < 1))
      throw Error("mesa_net: lambda_lower_bound must be in [0, 1) (λ starts at 1), got " +
                  std::to_string(a.lambda_lower_bound));
    if (a.num_heads < 0 || a.head_dim < 0)
      throw Error("mesa_net: num_heads and head_dim must be >= 0 (0 = automatic), got " +
                  std::to_string(a.num_heads) + " and " + std::to_string(a.head_dim));
    H_ = a.num_heads > 0 ? a.num_heads : ctx.n_heads;
    if (a.head_dim > 0) {
      d_ = a.head_dim;
    } else {
      if (H_ < 1 || ctx.d_model % H_ != 0)
        throw Error("mesa_net: d_model " + std::to_string(ctx.d_model) + " is not divisible by " +
                    std::to_string(H_) + " heads (set head_dim)");
      d_ = ctx.d_model / H_;
    }
    q_proj_ = register_module("q_proj", HeadProjection(template_projection(ctx.d_model, H_, d_, true, a.conv_size,
                                                                            /*l2_normalize=*/true), "q"));
    k_proj_ = register_module("k_proj", HeadProjection(template_projection(ctx.d_model, H_, d_, true, a.conv_size,
                                                                            /*l2_normalize=*/true), "k"));
    auto v_opts = template_projection(ctx.d_model, H_, d_, false, a.conv_size, false);
    v_opts.silu = false;  // v = x W_v, no activation
    v_proj_ = register_module("v_proj", HeadProjection(v_opts, "v"));
    a_proj_ = register_module("a_proj", make_linear(ctx.d_model, H_, /*bias=*/true));
    b_proj_ = register_module("b_proj", make_linear(ctx.d_model, H_, /*bias=*/true));
    if (a.use_output_gate) {
      gated_out_ = register_module("out", GatedOutput(ctx.d_model, H_, d_));
    } else {
      norm_ = register_module("norm", RMSNorm(d_));
      o_proj_ = register_module("o_proj", make_linear(H_ * d_, ctx.d_model));
    }
    torch::NoGradGuard no_grad;
    // softplus⁻¹(1 − lower bound): λ = 1 at initialisation.
    const double raw = std::log(std::expm1(1.0 - a.lambda_lower_bound));
    lambda_raw_ = register_parameter("lambda_params", torch::full({H_ * d_}, raw));
  }

  std::vector<std::string> no_weight_decay() const override { return {"lambda_params"}; }

  // Decode: the conv caches and the two states, a fixed number of CG steps (no tolerance read back): fixed shapes, no position.
  bool decode_step_is_static() const override { return true; }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t T = x.size(1);
    auto q = q_proj_(x, state), k = k_proj_(x, state), v = v_proj_(x, state);  // [B, T, H, d]
    const auto dt = recurrence_dtype(x);
    auto beta = torch::sigmoid(b_proj_(x).to(dt));    // [B, T, H]
    auto g = torch::log_sigmoid(a_proj_(x).to(dt));    // [B, T, H], <= 0
    auto lambda = (torch::softplus(lambda_raw_.to(dt)) + args_.lambda_lower_bound).view({H_, d_});

    auto h_kk = state_or_empty(state, "h_kk"), h_kv = state_or_empty(state, "h_kv");
    auto r = use_chunked_kernel(args_.form, state, T)
                 ? mesa_net_chunk(q, k, v, g, beta, lambda, h_kk, h_kv, args_.cg_steps, args_.chunk_size)
                 : mesa_net_recurrent(q, k, v, g, beta, lambda, h_kk, h_kv, args_.cg_steps);
    if (state) {
      state->tensors["h_kk"] = r.final_kk.detach();
      state->tensors["h_kv"] = r.final_kv.detach();
    }
    auto y = r.o.to(x.scalar_type());  // [B, T, H, d]
    if (args_.use_output_gate) return gated_out_(y, x);
    return o_proj_(norm_(y).reshape({x.size(0), T, H_ * d_}));
  }

 private:
  MesaNetArgs args_;
  int64_t H_ = 0, d_ = 0;
  HeadProjection q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr};
  torch::nn::Linear a_proj_{nullptr}, b_proj_{nullptr}, o_proj_{nullptr};
  RMSNorm norm_{nullptr};
  GatedOutput gated_out_{nullptr};
  torch::Tensor lambda_raw_;
};

// Every CG step is one pass of a chunked scalar-decay recurrence (the product H_t p_t), and the readout x_t G_t one
// more: (cg_steps + 1) × the chunked recurrence's cost. A decode step: H_t p once per CG step (2·d·d_h), the readout
// x_t G_t (2·d·d_h) and the two state updates (4·d·d_h).
static double mesa_net_flops(const MixingFlopsQuery& q) {
  const double steps = q.args.is_object() && q.args.contains("cg_steps") ? q.args["cg_steps"].get<double>() : 30.0;
  if (q.decode) return (2 * steps + 6) * q.d_model * q.head_dim;
  return (steps + 1) * chunked_recurrence_flops(q);
}

void register_mesa_net_family(Registry& r) {
  r.add_mixer(make_mixer_family<MesaNetArgs, MesaNetMixer>(
      "mesa_net",
      "MesaNet: per-token regularised least-squares readout solved by conjugate gradient (docs/models.md#mesanet)",
      {mesa_net_flops, {"recent linear memories", "purple"}, 2e-3, {mesa_net_fla_names()},
       {{"cg_steps", "conjugate-gradient steps per token, in training and in decoding alike"},
        {"lambda_lower_bound", "the ridge regulariser lambda = softplus(x) + lambda_lower_bound per head and key "
                               "channel (initialised to 1)"}}}));
}

}  // namespace mnemo
