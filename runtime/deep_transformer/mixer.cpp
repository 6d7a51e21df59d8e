// DeepTransformer (DT), SWDT and DOT mixers (docs/models.md#deeptransformers-swdt-and-dot) on the docs/models.md#shared-building-blocks template:
//   q̂ = l2norm(SiLU(Conv4(x W_q))), k̂ likewise, v = SiLU(Conv4(x W_v))          (per head)
//   α_t = σ(x w_α + 6), η_t = σ(x w_η + 0) (DOT: (1/c) σ(·)), γ_t = σ(x w_γ + 3) (SWDT, DOT; docs/models.md#atlas-family)
//   κ(k, q) = exp(s_h k̂·q̂), s_h = softplus(ρ_h), initialised to sqrt(d_h)
//   DT / SWDT: exact blocked attention with decay-window weights (kernel_attention)
//   DOT: kernel-form Omega rule with NLMS step e^{-s_h}, chunked (b = 64) with gradients at the chunk start
//   out = W_o concat_h( RMSNorm(y_h) ⊙ w ⊙ SiLU((x W_g)_h) )
// Decode caches grow with the sequence (kernel form = O(N) memory, like attention):
//   DT/SWDT: "k", "v", "w" (token weights), "g" (γ);  DOT: "k", "v", "a", "a0", "g", "pos".
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/deep_transformer/kernel_memory.h"
#include "runtime/kernels/precision.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"

namespace mnemo {

struct KernelMemoryArgs {
  int64_t num_heads = 0;  // 0: the model's n_heads
  int64_t head_dim = 0;   // 0: d_model / heads
  int64_t conv_size = 4;
  bool use_short_conv = true;
  int64_t window = 8;       // c (SWDT, DOT; DT has no window)
  int64_t chunk_size = 64;  // b (DOT only: model hyper-parameter; DT/SWDT are exact)
  double alpha_bias = 6.0, eta_bias = 0.0, gamma_bias = 3.0;
  bool row_max = true;         // DT/SWDT: subtract the per-row max logit (output RMSNorm is scale-invariant)
  int64_t query_block = 256;   // DT/SWDT: queries per attention block
  std::string form = "chunk";  // DOT: "chunk" | "recurrent" (token-by-token reference, same model)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(KernelMemoryArgs, num_heads, head_dim, conv_size, use_short_conv, window,
                                                chunk_size, alpha_bias, eta_bias, gamma_bias, row_max, query_block,
                                                form)

enum class KernelKind { DT, SWDT, DOT };

class KernelMemoryMixer : public Mixer {
 public:
  KernelMemoryMixer(const MixerContext& ctx, const KernelMemoryArgs& a, KernelKind kind) : a_(a), kind_(kind) {
    const std::string fam = kind == KernelKind::DT ? "deep_transformer" : kind == KernelKind::SWDT ? "swdt" : "dot";
    H_ = a.num_heads > 0 ? a.num_heads : ctx.n_heads;
    if (H_ < 1) throw Error(fam + ": number of heads must be >= 1");
    if (a.head_dim > 0) {
      d_ = a.head_dim;
    } else {
      if (ctx.d_model % H_ != 0) throw Error(fam + ": d_model is not divisible by the number of heads (set head_dim)");
      d_ = ctx.d_model / H_;
    }
    c_ = kind == KernelKind::DT ? 1 : a.window;
    if (c_ < 1) throw Error(fam + ": window must be >= 1, got " + std::to_string(a.window));
    if (a.chunk_size < 1) throw Error(fam + ": chunk_size must be >= 1, got " + std::to_string(a.chunk_size));
    if (a.query_block < 1) throw Error(fam + ": query_block must be >= 1");
    check_form(fam, a.form);
    auto proj = [&](bool l2, const std::string& name) {
      return register_module(name + "_proj",
                             HeadProjection(template_projection(ctx.d_model, H_, d_, a.use_short_conv, a.conv_size, l2),
                                            name));
    };
    q_proj_ = proj(true, "q");
    k_proj_ = proj(true, "k");
    v_proj_ = proj(false, "v");
    gates_ = register_module("gates", make_linear(ctx.d_model, 3 * H_, true));  // [α | η | γ] logits
    output_ = register_module("output", GatedOutput(ctx.d_model, H_, d_));
    torch::NoGradGuard ng;
    gates_->bias.narrow(0, 0, H_).fill_(a.alpha_bias);
    gates_->bias.narrow(0, H_, H_).fill_(a.eta_bias);
    gates_->bias.narrow(0, 2 * H_, H_).fill_(a.gamma_bias);
    const double s0 = std::sqrt(static_cast<double>(d_));
    rho_ = register_parameter("rho", torch::full({H_}, s0 + std::log(-std::expm1(-s0))));  // softplus^-1(sqrt(d_h))
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t T = x.size(1);
    auto q = q_proj_(x, state), k = k_proj_(x, state), v = v_proj_(x, state);
    const auto dt = recurrence_dtype(x);
    auto z = gates_(x).to(dt);
    auto log_alpha = torch::log_sigmoid(z.narrow(-1, 0, H_));
    auto eta = torch::sigmoid(z.narrow(-1, H_, H_));
    auto gamma = kind_ == KernelKind::DT ? torch::Tensor() : torch::sigmoid(z.narrow(-1, 2 * H_, H_));
    auto s = torch::softplus(rho_.to(dt));
    auto get = [&](const char* key) { return state && state->has(key) ? state->at(key) : torch::Tensor(); };
    torch::Tensor y;
    if (kind_ == KernelKind::DOT) {
      eta = eta / static_cast<double>(c_);
      DotState st{get("k"), get("v"), get("a"), get("a0"), get("g"), 0};
      if (state && state->has("pos")) st.pos = state->at("pos").item<int64_t>();
      auto r = a_.form == "recurrent" || (state && T == 1)
                   ? dot_recurrent(q, k, v, log_alpha, eta, gamma, s, st, c_, a_.chunk_size)
                   : dot_chunk(q, k, v, log_alpha, eta, gamma, s, st, c_, a_.chunk_size);
      if (state && T > 0) {
        for (auto& kv : {std::make_pair("k", r.state.k), std::make_pair("v", r.state.v), std::make_pair("a", r.state.a),
                         std::make_pair("a0", r.state.a0), std::make_pair("g", r.state.g)})
          state->tensors[kv.first] = kv.second.detach();
        state->tensors["pos"] = torch::full({1}, r.state.pos, torch::kLong);
      }
      y = r.y;
    } else {
      KernelAttnCache cache{get("k"), get("v"), get("w"), get("g")};
      auto r = kernel_attention(q, k, v, log_alpha, eta, gamma, s, cache, c_, a_.row_max, a_.query_block);
      if (state && T > 0) {
        state->tensors["k"] = r.cache.k.detach();
        state->tensors["v"] = r.cache.v.detach();
        state->tensors["w"] = r.cache.w.detach();
        state->tensors["g"] = r.cache.g.detach();
      }
      y = r.y;
    }
    return output_(y.to(x.scalar_type()), x);
  }

 private:
  KernelMemoryArgs a_;
  KernelKind kind_;
  int64_t H_ = 0, d_ = 0, c_ = 1;
  HeadProjection q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr};
  torch::nn::Linear gates_{nullptr};
  GatedOutput output_{nullptr};
  torch::Tensor rho_;
};

namespace {
struct DTMixer : KernelMemoryMixer {
  DTMixer(const MixerContext& c, const KernelMemoryArgs& a) : KernelMemoryMixer(c, a, KernelKind::DT) {}
};
struct SWDTMixer : KernelMemoryMixer {
  SWDTMixer(const MixerContext& c, const KernelMemoryArgs& a) : KernelMemoryMixer(c, a, KernelKind::SWDT) {}
};
struct DOTMixer : KernelMemoryMixer {
  DOTMixer(const MixerContext& c, const KernelMemoryArgs& a) : KernelMemoryMixer(c, a, KernelKind::DOT) {}
};
// The kernel memories' arguments whose meaning differs from the shared glossary's (runtime/registry.h).
std::map<std::string, std::string> kernel_memory_arg_meanings() {
  return {{"window", "c: the Omega window, the tokens each key's update spans (SWDT, DOT; DT has no window)"},
          {"chunk_size", "b: DOT's chunk, part of the model (DT and SWDT are exact; it does not apply to them)"}};
}
}  // namespace

void register_deep_transformer_families(Registry& r) {
  r.add_mixer(make_mixer_family<KernelMemoryArgs, DTMixer>(
      "deep_transformer", "DeepTransformer: Hebbian exp-kernel memory = decayed unnormalised attention (docs/models.md#deeptransformers-swdt-and-dot)",
      {sum_of(attention_flops, chunked_recurrence_flops), {"Atlas family", "blue"}, 2e-3, {}, kernel_memory_arg_meanings()},
      /*cpu_quickstart=*/true));
  // All three in the CPU quickstart (d_model-64 quickstart cell, 1 thread: swdt 16 s, dot 12 s).
  r.add_mixer(make_mixer_family<KernelMemoryArgs, SWDTMixer>(
      "swdt", "SWDT: windowed Hebbian exp-kernel memory, exact blocked attention form (docs/models.md#deeptransformers-swdt-and-dot)",
      {sum_of(attention_flops, chunked_recurrence_flops), {"Atlas family", "cyan"}, 2e-3, {}, kernel_memory_arg_meanings()},
      true));
  r.add_mixer(make_mixer_family<KernelMemoryArgs, DOTMixer>(
      "dot", "DOT: Omega-rule exp-kernel memory in coefficient form, chunked b = 64 (docs/models.md#deeptransformers-swdt-and-dot)",
      {sum_of(attention_flops, chunked_recurrence_flops), {"Atlas family", "pink"}, 2e-3, {}, kernel_memory_arg_meanings()},
      true));
}

}  // namespace mnemo
