// The `self_modifying_titans` mixer and the Hope model (docs/models.md#hope; arXiv 2512.24695 §8):
//   a = SiLU(Conv4(x W_a)), b = SiLU(Conv4(x W_b)), q = l2norm(SiLU(Conv4(x W_q)))          (per head)
//   y = self-modifying Titans (runtime/hope/hope.h) with chunk size `chunk_size`: k = l2norm(M_k(a)), v = l2norm(M_v(b)),
//       η and α read from M_η(a), M_α(a); q is the one non-adaptive read (Eq. 85)
//   out = W_o concat_h(RMSNorm(y_h))
// The five memories M(x) = x + x S start at their skip path S = 0 (Eq. 89), so that at initialisation the layer is a
// gated delta rule with keys a and values b; their initial states are trained (meta-learned) with the rest of the model. Hope = this mixer with the Continuum Memory System as each block's
// feed-forward part (block_ffn "cms", runtime/hope/cms.h).
// Decode state: "smt_start", "smt_running" [B, 5, H, d, d] (MLP memories: "smt_start_w1", "smt_start_w2",
// "smt_running_w1", "smt_running_w2") and the conv caches "a", "b", "q": O(1) in T.
#include "runtime/blocks/mixer_common.h"
#include "runtime/hope/hope.h"
#include "runtime/no_weight_decay.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"

namespace mnemo {

struct SelfModifyingTitansArgs {
  int64_t num_heads = 0;   // 0: the model's n_heads
  int64_t head_dim = 0;    // d (every memory is d × d); 0: d_model / heads
  int64_t conv_size = 4;   // the short conv on x̃ and q
  int64_t chunk_size = 16;  // C: the memories change every C tokens (Eq. 90); a model choice, not a speed knob
  double alpha_bias = 4.0;  // b_α at initialisation: α = σ(4) ≈ 0.98
  double eta_max = 1.0;     // η_t = eta_max · σ(·): the memories' inner step bound
  std::string form = "chunk";  // "chunk" | "recurrent" (full forwards; T == 1 decode is recurrent)
  std::string smt_memory = "matrix";  // "matrix": M(x) = x + x S; "mlp": M(x) = x + SiLU(x W2) W1 (hope.h)
  int64_t smt_memory_hidden = 0;      // h of the MLP memories; 0: the head dim d
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SelfModifyingTitansArgs, num_heads, head_dim, conv_size, chunk_size,
                                                alpha_bias, eta_max, form, smt_memory, smt_memory_hidden)

class SelfModifyingTitansMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  SelfModifyingTitansMixer(const MixerContext& ctx, const SelfModifyingTitansArgs& a) : args_(a) {
    check_kernel_form("self_modifying_titans", a.form, a.chunk_size);
    if (a.conv_size < 1)
      throw Error("self_modifying_titans: conv_size must be >= 1, got " + std::to_string(a.conv_size));
    if (a.num_heads < 0 || a.head_dim < 0)
      throw Error("self_modifying_titans: num_heads and head_dim must be >= 0 (0 = automatic), got " +
                  std::to_string(a.num_heads) + " and " + std::to_string(a.head_dim));
    H_ = a.num_heads > 0 ? a.num_heads : ctx.n_heads;
    if (a.head_dim > 0) {
      d_ = a.head_dim;
    } else {
      if (H_ < 1 || ctx.d_model % H_ != 0)
        throw Error("self_modifying_titans: d_model " + std::to_string(ctx.d_model) + " is not divisible by " +
                    std::to_string(H_) + " heads (set head_dim)");
      d_ = ctx.d_model / H_;
    }
    a_proj_ = register_module("a_proj", HeadProjection(template_projection(ctx.d_model, H_, d_, true, a.conv_size,
                                                                            /*l2_normalize=*/false), "a"));
    b_proj_ = register_module("b_proj", HeadProjection(template_projection(ctx.d_model, H_, d_, true, a.conv_size,
                                                                            /*l2_normalize=*/false), "b"));
    q_proj_ = register_module("q_proj", HeadProjection(template_projection(ctx.d_model, H_, d_, true, a.conv_size,
                                                                            /*l2_normalize=*/true), "q"));
    norm_ = register_module("norm", RMSNorm(d_));
    o_proj_ = register_module("o_proj", make_linear(H_ * d_, ctx.d_model));
    if (a.smt_memory != "matrix" && a.smt_memory != "mlp")
      throw Error("self_modifying_titans: smt_memory must be \"matrix\" or \"mlp\", got \"" + a.smt_memory + "\"");
    if (a.smt_memory_hidden < 0)
      throw Error("self_modifying_titans: smt_memory_hidden must be >= 0 (0 = the head dim), got " +
                  std::to_string(a.smt_memory_hidden));
    mlp_ = a.smt_memory == "mlp";
    if (mlp_) {
      // W1 = 0: every memory starts as its skip path, as the matrix memories do. W2 ~ N(0, 1): the memories read
      // l2-normalised inputs, so the hidden pre-activations start at unit variance and the first in-context steps of
      // W1 write through features of order 1 (at PyTorch's Linear scale, 1/√d, they were ~0.1 and MQAR learned
      // nothing in 200 steps: docs/models.md#hope).
      const int64_t h = a.smt_memory_hidden > 0 ? a.smt_memory_hidden : d_;
      init_mlp_.w1 = register_parameter("init_w1", torch::zeros({kSmtMemories, H_, h, d_}));
      init_mlp_.w2 = register_parameter("init_w2", torch::randn({kSmtMemories, H_, d_, h}) * (2.0 / std::sqrt(double(h))));
    } else {
      init_ = register_parameter("init_memories", torch::zeros({kSmtMemories, H_, d_, d_}));
    }
    gates_.w_eta = register_parameter("w_eta", torch::randn({H_, d_}) * 0.02);
    gates_.b_eta = register_parameter("b_eta", torch::zeros({H_}));
    gates_.w_alpha = register_parameter("w_alpha", torch::randn({H_, d_}) * 0.02);
    gates_.b_alpha = register_parameter("b_alpha", torch::full({H_}, a.alpha_bias));
    gates_.eta_max = a.eta_max;
    if (!(a.eta_max > 0)) throw Error("self_modifying_titans: eta_max must be > 0, got " + std::to_string(a.eta_max));
  }

  // The memories' initial states are pulled towards zero by nothing but the loss, as a memory's state is.
  std::vector<std::string> no_weight_decay() const override {
    if (mlp_) return {"init_w1", "init_w2", "w_eta", "b_eta", "w_alpha", "b_alpha"};
    return {"init_memories", "w_eta", "b_eta", "w_alpha", "b_alpha"};
  }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t T = x.size(1), offset = state ? state->pos : 0;
    auto a = a_proj_(x, state), b = b_proj_(x, state), q = q_proj_(x, state);  // [B, T, H, d]
    const bool chunked = use_chunked_kernel(args_.form, state, T);
    torch::Tensor y;
    if (mlp_) {
      const SmtMlpMemories start{state_or_empty(state, "smt_start_w1"), state_or_empty(state, "smt_start_w2")};
      const SmtMlpMemories running{state_or_empty(state, "smt_running_w1"), state_or_empty(state, "smt_running_w2")};
      auto r = chunked ? smt_mlp_chunk(a, b, q, init_mlp_, gates_, start, running, args_.chunk_size, offset)
                       : smt_mlp_recurrent(a, b, q, init_mlp_, gates_, start, running, args_.chunk_size, offset);
      if (state) {
        state->tensors["smt_start_w1"] = r.chunk_start.w1.detach();
        state->tensors["smt_start_w2"] = r.chunk_start.w2.detach();
        state->tensors["smt_running_w1"] = r.running.w1.detach();
        state->tensors["smt_running_w2"] = r.running.w2.detach();
      }
      y = r.o;
    } else {
      auto start = state_or_empty(state, "smt_start"), running = state_or_empty(state, "smt_running");
      auto r = chunked ? smt_chunk(a, b, q, init_, gates_, start, running, args_.chunk_size, offset)
                       : smt_recurrent(a, b, q, init_, gates_, start, running, args_.chunk_size, offset);
      if (state) {
        state->tensors["smt_start"] = r.chunk_start.detach();
        state->tensors["smt_running"] = r.running.detach();
      }
      y = r.o;
    }
    y = y.to(x.scalar_type());
    return o_proj_(norm_(y).reshape({x.size(0), T, H_ * d_}));
  }

 private:
  SelfModifyingTitansArgs args_;
  int64_t H_ = 0, d_ = 0;
  HeadProjection a_proj_{nullptr}, b_proj_{nullptr}, q_proj_{nullptr};
  RMSNorm norm_{nullptr};
  torch::nn::Linear o_proj_{nullptr};
  bool mlp_ = false;
  torch::Tensor init_;         // matrix memories [5, H, d, d]
  SmtMlpMemories init_mlp_;    // MLP memories [5, H, h, d], [5, H, d, h]
  SmtGates gates_;
};

// Per token and head (d_h = head dim): five memory reads (3 of a, 1 of b, 1 of q), the self-generated values and the
// chunk-start products of k for the five memories (2 · 5 each), 15 · 2·d_h² in all; and the five memories' gated
// delta-rule pass (5 × the chunked recurrence). A decode step: the same reads and five rank-one updates (4·d·d_h each).
// MLP memories (hidden h): each read is two products (4·d_h·h), and each memory's step three more (ΔW1, e W1ᵀ, ΔW2:
// 6·d_h·h), with or without a chunk.
static double smt_flops(const MixingFlopsQuery& q) {
  if (q.args.value("smt_memory", std::string("matrix")) == "mlp") {
    const double given = number_arg(q.args, "smt_memory_hidden", 0), hidden = given > 0 ? given : q.head_dim;
    return (15 * 4.0 + 5 * 6.0) * q.d_model * hidden;
  }
  const double reads = 30.0 * q.d_model * q.head_dim;
  if (q.decode) return reads + 5 * 4.0 * q.d_model * q.head_dim;
  return reads + 5 * chunked_recurrence_flops(q);
}

void register_hope_families(Registry& r) {
  r.add_mixer(make_mixer_family<SelfModifyingTitansArgs, SelfModifyingTitansMixer>(
      "self_modifying_titans",
      "Self-modifying Titans: five chunk-wise DGD memories that generate their own keys, values, rates and targets "
      "(docs/models.md#hope)",
      {smt_flops, {"nested learning", "orange"}, 2e-3, {},
       {{"chunk_size", "C: every memory read inside a chunk uses the chunk's start state and the memories change "
                       "once per C tokens (arXiv 2512.24695 Eq. 90); a model choice, not only a speed knob"},
        {"alpha_bias", "the retention gate's bias at initialisation (alpha = sigmoid(alpha_bias))"},
        {"eta_max", "the memories' inner step bound: eta_t = eta_max * sigmoid(...)"},
        {"smt_memory", "the memories: \"matrix\" (M(x) = x + x S, the DGD step) or \"mlp\" (M(x) = x + SiLU(x W2) W1, "
                       "Eq. 89's block, gradient descent with retention; docs/models.md#hope)"},
        {"smt_memory_hidden", "hidden width h of the MLP memories (0 = the head dim)"}}}));
  ModelFamily hope;
  hope.name = "hope";
  hope.description =
      "Hope: self_modifying_titans with the Continuum Memory System as each block's feed-forward part "
      "(docs/models.md#hope)";
  hope.layer_pattern = {"self_modifying_titans"};
  hope.overrides = {{"block_ffn", "cms"}};
  hope.style = {"nested learning", "red"};
  hope.cpu_quickstart = true;
  r.add_model(hope);
}

}  // namespace mnemo
