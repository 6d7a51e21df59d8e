// MoM mixer (docs/models.md#mom) with Gated DeltaNet memories (kernels: runtime/delta_rule/, the fused chunk kernels on
// CUDA tensors):
//   1. z = W_g x; p = softmax(z) (fp32); (w, Sel) = top-k (ties -> lower index); w <- w / Σ w
//   2. memory m sees only its routed tokens, in time order (stable dispatch, no token dropping):
//      q = W_q x (shared), k = W_k^m x, v = W_v^m x; SiLU(Conv4(·)) over m's own stream (conv weights
//      shared, the conv resets at the stream start, own cache at decode); q̂, k̂ = l2norm, q̂ · d_k^-1/2;
//      β = σ(W_b^m x), α = exp(-exp(A_log) softplus(W_a^m x + dt_bias)) (A_log, dt_bias shared);
//      Gated DeltaNet over the stream (decay per routed token; inactive memories untouched)
//   3. shared memory: the same with W_k^s, W_v^s, W_b^s, W_a^s over the full sequence
//   4. o = Σ_{m ∈ Sel} w_m o_m + o_s
//   5. y = W_o concat_h( RMSNorm(o_h) ⊙ w ⊙ SiLU((W_gate x)_h) )
// Aux loss (docs/models.md#mom): aux_coef · E Σ tokens_per_expert · router_prob, per layer, divided by n_layers
// (the mean over layers of the layer-wise Mixtral loss; attention layers of a hybrid count as 0).
// Decode state: "mem<m>", "conv_{q,k,v}<m>" per memory and "mem_s", "conv_{q,k,v}_s".
#include <cmath>

#include "runtime/blocks/mixer_common.h"
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/kernels/precision.h"
#include "runtime/mom/mom.h"
#include "runtime/no_weight_decay.h"
#include "runtime/packed_sequences.h"
#include "runtime/recurrent_block.h"
#include "runtime/registry.h"

namespace mnemo {

MomRouting mom_route(const torch::Tensor& logits, int64_t k) {
  const auto dt = recurrence_dtype(logits);
  auto p = torch::softmax(logits.to(dt), -1);
  auto sorted = torch::sort(p, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  auto idx = std::get<1>(sorted).narrow(-1, 0, k);
  auto vals = p.gather(-1, idx);
  return {p, idx, vals / vals.sum(-1, true)};
}

torch::Tensor mom_balance_loss(const torch::Tensor& p, const torch::Tensor& idx) {
  const int64_t E = p.size(-1);
  auto pf = p.reshape({-1, E});
  auto onehot = torch::one_hot(idx.reshape({-1, idx.size(-1)}), E).to(p.scalar_type());  // [N, k, E]
  auto tokens_per_expert = onehot.mean(0);                                                // [k, E]
  auto router_prob = pf.mean(0);                                                          // [E]
  return static_cast<double>(E) * (tokens_per_expert * router_prob.unsqueeze(0)).sum();
}

std::pair<torch::Tensor, torch::Tensor> stream_conv(const torch::Tensor& x, const torch::Tensor& lens,
                                                    const torch::Tensor& weight, const torch::Tensor& prev) {
  const int64_t B = x.size(0), C = x.size(2), K = weight.size(2);
  auto pre = prev.defined() ? prev.to(x.scalar_type()) : torch::zeros({B, C, K - 1}, x.options());
  auto full = torch::cat({pre, x.transpose(1, 2)}, 2);  // [B, C, K-1+L]
  auto y = torch::conv1d(full, weight.to(x.scalar_type()), torch::Tensor(), torch::IntArrayRef({1}),
                         torch::IntArrayRef({0}), torch::IntArrayRef({1}), C);
  auto at = (lens.view({B, 1, 1}) + torch::arange(K - 1, lens.options()).view({1, 1, K - 1})).expand({B, C, K - 1});
  return std::make_pair(torch::silu(y.transpose(1, 2)), full.gather(2, at));
}

struct MomArgs {
  int64_t num_memories = 4;
  int64_t topk = 2;
  bool shared_mem = true;
  int64_t num_heads = 0;  // 0: the model's n_heads
  int64_t head_dim = 0;   // d_k; 0: d_model / heads (the paper's configs: 4 heads of 256)
  double expand_v = 1.0;
  int64_t conv_size = 4;
  int64_t chunk_size = 64;     // speed knob: the GDN chunk form is exact
  std::string form = "chunk";  // "chunk" | "recurrent"
  double a_init_min = 0.0, a_init_max = 16.0;
  double aux_coef = 0.01;  // docs/models.md#mom; 0 switches the load-balancing loss off
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MomArgs, num_memories, topk, shared_mem, num_heads, head_dim, expand_v,
                                                conv_size, chunk_size, form, a_init_min, a_init_max, aux_coef)

class MomMixer : public Mixer, public DeclaresNoWeightDecay {
 public:
  MomMixer(const MixerContext& ctx, const MomArgs& a) : a_(a), n_layers_(std::max<int64_t>(1, ctx.n_layers)) {
    E_ = a.num_memories;
    if (E_ < 1 || a.topk < 1 || a.topk > E_)
      throw Error("mom: need num_memories >= 1 and 1 <= topk <= num_memories, got " + std::to_string(E_) + ", " +
                  std::to_string(a.topk));
    H_ = a.num_heads > 0 ? a.num_heads : ctx.n_heads;
    if (a.head_dim > 0) {
      dk_ = a.head_dim;
    } else {
      if (H_ < 1 || ctx.d_model % H_ != 0) throw Error("mom: d_model is not divisible by the heads (set head_dim)");
      dk_ = ctx.d_model / H_;
    }
    dv_ = static_cast<int64_t>(std::llround(a.expand_v * dk_));
    if (dv_ < 1 || std::abs(a.expand_v * dk_ - dv_) > 1e-9) throw Error("mom: expand_v * head_dim must be an integer");
    if (a.conv_size < 1 || a.chunk_size < 1) throw Error("mom: conv_size and chunk_size must be >= 1");
    check_form("mom", a.form);
    const int64_t D = ctx.d_model, M = E_ + (a.shared_mem ? 1 : 0);  // memory slots; the last is the shared one
    router_ = register_module("router", make_linear(D, E_));
    q_proj_ = register_module("q_proj", make_linear(D, H_ * dk_));
    k_proj_ = register_module("k_proj", make_linear(D, M * H_ * dk_));
    v_proj_ = register_module("v_proj", make_linear(D, M * H_ * dv_));
    b_proj_ = register_module("b_proj", make_linear(D, M * H_, /*bias=*/true));
    a_proj_ = register_module("a_proj", make_linear(D, M * H_));
    conv_q_ = register_module("conv_q", ShortConv(H_ * dk_, a.conv_size, true));
    conv_k_ = register_module("conv_k", ShortConv(H_ * dk_, a.conv_size, true));
    conv_v_ = register_module("conv_v", ShortConv(H_ * dv_, a.conv_size, true));
    A_log_ = register_parameter("A_log", init_a_log(H_, std::max(a.a_init_min, 1e-6), a.a_init_max));
    dt_bias_ = register_parameter("dt_bias", init_dt_bias(H_));
    output_ = register_module("output", GatedOutput(D, H_, dv_));
  }

  torch::Tensor aux_loss() const override { return aux_; }

  std::vector<std::string> no_weight_decay() const override { return {"A_log", "dt_bias"}; }

  torch::Tensor forward(const torch::Tensor& x, LayerState* state) override {
    const int64_t B = x.size(0), T = x.size(1), M = E_ + (a_.shared_mem ? 1 : 0);
    const auto dt = recurrence_dtype(x);
    auto route = mom_route(router_(x), a_.topk);
    aux_ = a_.aux_coef > 0 && T > 0 ? (a_.aux_coef / n_layers_) * mom_balance_loss(route.p, route.idx) : torch::Tensor();
    auto q_all = q_proj_(x);                                  // [B, T, H dk] (before the conv)
    auto k_all = k_proj_(x).view({B, T, M, H_ * dk_});
    auto v_all = v_proj_(x).view({B, T, M, H_ * dv_});
    auto beta_all = torch::sigmoid(b_proj_(x).to(dt)).view({B, T, M, H_});
    auto g_all = (-A_log_.to(dt).exp() * torch::softplus(a_proj_(x).to(dt).view({B, T, M, H_}) + dt_bias_.to(dt)));
    auto out = torch::zeros({B, T, H_, dv_}, x.options().dtype(dt));
    auto tpos = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(x.device())).view({1, T});
    // Which memories each token writes [B, T, M] and each memory's longest stream, read on the host once for all.
    auto routed = memories_written(route);
    auto stream_lens = routed.sum(1);  // [B, M]
    const auto longest = T ? std::get<0>(stream_lens.max(0)).cpu() : torch::zeros({M}, torch::kLong);
    for (int64_t m = 0; m < M; ++m) {
      const bool shared = m == E_;
      const std::string tag = shared ? "_s" : std::to_string(m);
      auto sel = routed.select(2, m);  // [B, T]
      auto wm = shared ? torch::ones({B, T}, out.options()) : routing_weight(route, m).to(dt);
      auto lens = stream_lens.select(1, m);  // [B]
      const int64_t L = longest[m].item<int64_t>();
      auto get = [&](const std::string& key, std::vector<int64_t> shape) {
        if (state && state->has(key)) return state->at(key);
        return state ? torch::zeros(shape, x.options().dtype(key.rfind("mem", 0) == 0 ? dt : x.scalar_type()))
                     : torch::Tensor();
      };
      auto h0 = get("mem" + tag, {B, H_, dk_, dv_});
      auto cq = get("conv_q" + tag, {B, H_ * dk_, a_.conv_size - 1});
      auto ck = get("conv_k" + tag, {B, H_ * dk_, a_.conv_size - 1});
      auto cv = get("conv_v" + tag, {B, H_ * dv_, a_.conv_size - 1});
      if (L == 0) {  // no token for this memory: state untouched (created on the first stateful call)
        if (state) {
          state->tensors["mem" + tag] = h0, state->tensors["conv_q" + tag] = cq;
          state->tensors["conv_k" + tag] = ck, state->tensors["conv_v" + tag] = cv;
        }
        continue;
      }
      // Stable dispatch: routed tokens first, in time order (keys t + T·[not routed] are unique).
      auto order = std::get<1>(torch::sort(tpos + T * sel.logical_not().to(torch::kLong), -1)).narrow(1, 0, L);
      auto valid = torch::arange(L, tpos.options()).view({1, L}) < lens.view({B, 1});  // [B, L]
      auto take = [&](const torch::Tensor& t) {  // [B, T, C] -> [B, L, C]
        return t.gather(1, order.unsqueeze(-1).expand({B, L, t.size(-1)}));
      };
      auto vf = valid.to(dt).unsqueeze(-1);
      auto q = stream_conv(take(q_all), lens, conv_q_->weight, cq);
      auto k = stream_conv(take(k_all.select(2, m)), lens, conv_k_->weight, ck);
      auto v = stream_conv(take(v_all.select(2, m)), lens, conv_v_->weight, cv);
      auto qh = l2norm(q.first.view({B, L, H_, dk_}));
      auto kh = l2norm(k.first.view({B, L, H_, dk_})) * vf.unsqueeze(-1).to(x.scalar_type());  // padding: k = 0
      auto beta = take(beta_all.select(2, m)) * vf;                                           // β = 0
      auto g = take(g_all.select(2, m)) * vf;                                                 // g = 0: inert
      const double scale = 1.0 / std::sqrt(static_cast<double>(dk_));
      const bool rec = a_.form == "recurrent" || (state && T == 1);
      // On a GPU the delta rule's fused chunk kernels (runtime/delta_rule/chunk_kernel.cuh); the padding rows
      // (k = 0, β = 0, g = 0) leave the state as the stream's last token left it.
      auto vm = v.first.view({B, L, H_, dv_});
      auto r = rec                            ? delta_rule_recurrent(qh, kh, vm, beta, g, h0, scale)
               : delta_rule_fused_route(qh) ? delta_rule_chunk_fused(qh, kh, vm, beta, g, h0, scale, a_.chunk_size)
                                            : delta_rule_chunk(qh, kh, vm, beta, g, h0, scale, a_.chunk_size);
      auto wl = take(wm.unsqueeze(-1)) * vf;  // mixing weight, 0 on padding   [B, L, 1]
      auto om = (r.o.to(dt) * wl.unsqueeze(-1)).reshape({B, L, H_ * dv_});
      out = out + torch::zeros({B, T, H_ * dv_}, out.options())
                      .scatter_add(1, order.unsqueeze(-1).expand({B, L, H_ * dv_}), om)
                      .view({B, T, H_, dv_});
      if (state) {
        state->tensors["mem" + tag] = r.final_state.detach();
        state->tensors["conv_q" + tag] = q.second.detach(), state->tensors["conv_k" + tag] = k.second.detach();
        state->tensors["conv_v" + tag] = v.second.detach();
      }
    }
    return output_(out.to(x.scalar_type()), x);
  }

  // Packed sequences (docs/models.md#packed-sequences): each memory's stream is its routed tokens in packed order,
  // one sequence per document that routed any token to it, run by the fused chunk kernels with those bounds (the
  // short convs restart at each); documents are never mixed. The auxiliary loss is the layer's over the row's tokens.
  bool packs_sequences(const torch::Tensor& x) const override {
    return a_.form == "chunk" && packed_forms_enabled(x, delta_rule_fused_on_device(x));
  }
  torch::Tensor forward_packed(const torch::Tensor& x, const PackedSequences& seqs) override {
    const int64_t N = x.size(1), M = E_ + (a_.shared_mem ? 1 : 0);
    const auto dt = recurrence_dtype(x);
    auto route = mom_route(router_(x), a_.topk);
    aux_ = a_.aux_coef > 0 && N > 0 ? (a_.aux_coef / n_layers_) * mom_balance_loss(route.p, route.idx) : torch::Tensor();
    auto q_all = q_proj_(x)[0];                                 // [N, H dk]
    auto k_all = k_proj_(x)[0].view({N, M, H_ * dk_});
    auto v_all = v_proj_(x)[0].view({N, M, H_ * dv_});
    auto beta_all = torch::sigmoid(b_proj_(x).to(dt))[0].view({N, M, H_});
    auto g_all = -A_log_.to(dt).exp() * torch::softplus(a_proj_(x).to(dt)[0].view({N, M, H_}) + dt_bias_.to(dt));
    // Which memories each token writes ([N, M]), read on the host once for every memory's stream bounds.
    const auto routed_host = memories_written(route)[0].cpu();
    const auto* hit = routed_host.data_ptr<bool>();
    auto out = torch::zeros({N, H_ * dv_}, x.options().dtype(dt));
    const double scale = 1.0 / std::sqrt(static_cast<double>(dk_));
    for (int64_t m = 0; m < M; ++m) {
      std::vector<int64_t> positions, bounds = {0};
      for (int64_t d = 0; d < seqs.count(); ++d) {
        for (int64_t t = seqs.bounds[size_t(d)]; t < seqs.bounds[size_t(d + 1)]; ++t)
          if (hit[t * M + m]) positions.push_back(t);
        if (int64_t(positions.size()) > bounds.back()) bounds.push_back(int64_t(positions.size()));
      }
      if (positions.empty()) continue;
      const auto stream = PackedSequences::from_bounds(bounds, x.device());
      const auto at = torch::tensor(positions, torch::kInt64).to(x.device());
      const int64_t L = at.size(0);
      auto conv = [&](ShortConv& c, const torch::Tensor& t) { return c->forward_packed(t.unsqueeze(0), stream); };
      auto qh = l2norm(conv(conv_q_, q_all.index_select(0, at)).view({1, L, H_, dk_}));
      auto kh = l2norm(conv(conv_k_, k_all.select(1, m).index_select(0, at)).view({1, L, H_, dk_}));
      auto vh = conv(conv_v_, v_all.select(1, m).index_select(0, at)).view({1, L, H_, dv_});
      auto beta = beta_all.select(1, m).index_select(0, at).unsqueeze(0);
      auto g = g_all.select(1, m).index_select(0, at).unsqueeze(0);
      auto r = delta_rule_chunk_fused(qh, kh, vh, beta, g, {}, scale, a_.chunk_size, stream.cu_seqlens);
      // The routing weight of memory m for each of its tokens (1 for the shared memory).
      auto w = m == E_ ? torch::ones({L, 1}, out.options())
                       : routing_weight(route, m)[0].index_select(0, at).to(dt).unsqueeze(-1);
      out = out.index_add(0, at, r.o[0].to(dt).reshape({L, H_ * dv_}) * w);
    }
    return output_(out.view({1, N, H_, dv_}).to(x.scalar_type()), x);
  }

 private:
  // Which memories each token writes, [B, T, M] (bool): its top-k routed ones and the shared one.
  torch::Tensor memories_written(const MomRouting& route) const {
    const int64_t M = E_ + (a_.shared_mem ? 1 : 0);
    auto sizes = route.idx.sizes().vec();
    sizes.back() = M;
    auto written = torch::zeros(sizes, route.idx.options().dtype(torch::kBool));
    written.narrow(-1, 0, E_).scatter_(-1, route.idx, true);
    if (a_.shared_mem) written.select(-1, E_).fill_(true);
    return written;
  }

  // Routed memory m's weight for each token [B, T] (0 where the token did not pick it).
  static torch::Tensor routing_weight(const MomRouting& route, int64_t m) {
    return (route.w * (route.idx == m).to(route.w.scalar_type())).sum(-1);
  }

  MomArgs a_;
  int64_t n_layers_, E_ = 0, H_ = 0, dk_ = 0, dv_ = 0;
  torch::nn::Linear router_{nullptr}, q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, b_proj_{nullptr},
      a_proj_{nullptr};
  ShortConv conv_q_{nullptr}, conv_k_{nullptr}, conv_v_{nullptr};
  torch::Tensor A_log_, dt_bias_;
  GatedOutput output_{nullptr};
  torch::Tensor aux_;
};

void register_mom_families(Registry& r) {
  r.add_mixer(make_mixer_family<MomArgs, MomMixer>(
      "mom", "MoM: top-k routed Gated DeltaNet memories + shared memory, load-balancing aux loss (docs/models.md#mom)",
      {chunked_recurrence_flops, {"MoM / Lattice", "blue"}, 2e-3, {},
       {{"num_memories", "routed Gated DeltaNet memories per layer"},
        {"topk", "memories each token is routed to"},
        {"shared_mem", "a shared memory every token writes to and reads from, beside the routed ones"},
        {"aux_coef", "weight of the router's load-balancing loss (docs/models.md#mom); 0: off"}}},
      /*cpu_quickstart=*/true));  // d64 quickstart cell: 32 s (1 thread)
  // MoM Hybrid (§8.4, §10): one causal softmax-attention layer (transformer mixer, RoPE) after every 7 MoM
  // layers, i.e. attention at 0-indexed layers 7, 15, 23 of 24. With n_layers <= 7 there is no attention layer.
  ModelFamily h;
  h.name = "mom_hybrid";
  h.description = "MoM Hybrid: attention after every 7 mom layers (layers 7, 15, 23 of 24; docs/models.md#mom, docs/models.md#hybrids)";
  h.layer_pattern = {"mom", "mom", "mom", "mom", "mom", "mom", "mom", "transformer"};
  h.overrides = json::object();
  h.style = {"MoM / Lattice", "cyan"};
  h.cpu_quickstart = false;
  h.quickstart_note =
      "same model as mom here: MoM Hybrid puts attention after every 7 MoM layers, so the quickstart's 2 layers "
      "would be two MoM layers, which the mom family already is";
  r.add_model(h);
}

}  // namespace mnemo
