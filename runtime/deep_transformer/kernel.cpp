// Kernels of DT / SWDT (blocked attention with decay-window weights) and DOT (kernel-form Omega rule,
// token by token and chunk-wise). Spec models.md §7.8, §7.6, §12.10.
#include <limits>
#include <vector>

#include "core/common.h"
#include "runtime/deep_transformer/kernel_memory.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

namespace {

torch::Tensor bh(const torch::Tensor& x, torch::ScalarType dt) { return x.to(dt).transpose(1, 2); }  // [B,T,H,*] -> [B,H,T,*]
torch::Tensor cat_or(const torch::Tensor& a, const torch::Tensor& b) { return a.defined() ? torch::cat({a, b}, 2) : b; }

void check(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& la,
           const torch::Tensor& s, int64_t window) {
  if (q.dim() != 4 || k.sizes() != q.sizes() || v.dim() != 4 || v.size(1) != q.size(1) || la.dim() != 3 ||
      s.dim() != 1 || s.size(0) != q.size(2) || window < 1)
    throw Error("kernel memory: expected q, k [B,T,H,d], v [B,T,H,dv], gates [B,T,H], s [H], window >= 1; got q " +
                c10::str(q.sizes()) + ", v " + c10::str(v.sizes()) + ", gates " + c10::str(la.sizes()) + ", s " +
                c10::str(s.sizes()));
}

}  // namespace

KernelAttnResult kernel_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& gamma,
                                  const torch::Tensor& s, const KernelAttnCache& cache, int64_t c, bool row_max,
                                  int64_t query_block) {
  check(q, k, v, log_alpha, s, c);
  const AutocastOff autocast_off;  // §12 rule 1: the recurrence in fp32 under bf16 autocast
  const auto dt = recurrence_dtype(v);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2);
  const int64_t Nc = cache.k.defined() ? cache.k.size(2) : 0;
  auto Q = bh(q, dt), Kn = bh(k, dt), Vn = bh(v, dt);
  auto b = bh(log_alpha, dt).cumsum(2);  // b_t = Σ_{r<=t} log α_r  [B, H, T]
  auto et = bh(eta, dt);
  auto gn = gamma.defined() ? bh(gamma, dt) : torch::ones({B, H, T}, Q.options());
  auto K = cat_or(Nc ? cache.k.to(dt) : torch::Tensor(), Kn), V = cat_or(Nc ? cache.v.to(dt) : torch::Tensor(), Vn);
  auto G = cat_or(Nc ? cache.g.to(dt) : torch::Tensor(), gn);
  const int64_t N = Nc + T;
  // key positions relative to this call: cached tokens are -Nc..-1, new tokens 0..T-1
  auto kpos = torch::arange(-Nc, T, torch::TensorOptions().dtype(torch::kLong).device(q.device()));
  auto base = Nc ? torch::cat({cache.w.to(dt), torch::zeros({B, H, T}, Q.options())}, 2) : torch::Tensor();
  // Per offset o: n = pos_i + o, coefficient γ_i η_n, cumulative log decay b_n (gathered; masked below).
  std::vector<torch::Tensor> coef, bn, npos;
  for (int64_t o = 0; o < c; ++o) {
    auto n = kpos + o;
    auto valid = (n >= 0) & (n < T);
    auto idx = n.clamp(0, std::max<int64_t>(T - 1, 0));
    auto e = et.index_select(2, idx), bb = b.index_select(2, idx);
    coef.push_back(torch::where(valid, G * e, torch::zeros({}, Q.options())));
    bn.push_back(bb);
    npos.push_back(n);
  }
  auto sc = s.to(dt).view({1, H, 1, 1});
  std::vector<torch::Tensor> ys;
  torch::Tensor w_last;
  for (int64_t t0 = 0; t0 < T; t0 += query_block) {
    const int64_t L = std::min(query_block, T - t0);
    auto tpos = torch::arange(t0, t0 + L, kpos.options()).view({L, 1});
    auto bt = b.narrow(2, t0, L).unsqueeze(-1);  // [B, H, L, 1]
    auto w = base.defined() ? base.unsqueeze(2) * bt.exp() : torch::zeros({B, H, L, N}, Q.options());
    for (int64_t o = 0; o < c; ++o) {
      auto on = (npos[o].view({1, N}) <= tpos);  // n <= t (n >= 0 folded into coef)
      auto d = (bt - bn[o].unsqueeze(2)).clamp_max(0);  // b_t - b_n <= 0 (masked before exp, §12.3)
      w = w + torch::where(on, coef[o].unsqueeze(2) * d.exp(), torch::zeros({}, Q.options()));
    }
    auto causal = kpos.view({1, N}) <= tpos;  // [L, N]
    auto logits = sc * torch::matmul(Q.narrow(2, t0, L), K.transpose(-1, -2));  // s q̂·k̂
    logits = logits.masked_fill(causal.logical_not(), -std::numeric_limits<double>::infinity());
    if (row_max) logits = logits - std::get<0>(logits.max(-1, true));
    ys.push_back(torch::matmul(w * logits.exp(), V));
    if (t0 + L == T) w_last = w.select(2, L - 1);
  }
  KernelAttnResult r;
  r.y = T ? torch::cat(ys, 2).transpose(1, 2).to(v.scalar_type())
          : torch::zeros({B, 0, H, v.size(3)}, v.options());
  r.cache = T ? KernelAttnCache{K, V, w_last, G} : cache;
  return r;
}

namespace {

struct DotPrep {
  torch::Tensor Q, K, V, la, et, ga, s;
  torch::ScalarType dt;
};
DotPrep dot_prep(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& la,
                 const torch::Tensor& eta, const torch::Tensor& gamma, const torch::Tensor& s) {
  const auto dt = recurrence_dtype(v);
  auto ga = gamma.defined() ? bh(gamma, dt) : torch::ones_like(bh(eta, dt));
  return {bh(q, dt), bh(k, dt), bh(v, dt), bh(la, dt), bh(eta, dt), ga, s.to(dt).view({1, -1, 1, 1}), dt};
}

// Append T new tokens (zero coefficients) to the state.
DotState dot_append(const DotState& st, const DotPrep& p, int64_t from, int64_t len) {
  DotState o = st;
  auto zeros = torch::zeros({p.V.size(0), p.V.size(1), len, p.V.size(3)}, p.V.options());
  o.k = cat_or(st.k.defined() ? st.k.to(p.dt) : torch::Tensor(), p.K.narrow(2, from, len));
  o.v = cat_or(st.v.defined() ? st.v.to(p.dt) : torch::Tensor(), p.V.narrow(2, from, len));
  o.a = cat_or(st.a.defined() ? st.a.to(p.dt) : torch::Tensor(), zeros);
  o.a0 = cat_or(st.a0.defined() ? st.a0.to(p.dt) : torch::Tensor(), zeros);
  o.g = cat_or(st.g.defined() ? st.g.to(p.dt) : torch::Tensor(), p.ga.narrow(2, from, len));
  return o;
}

torch::Tensor kappa(const DotPrep& p, const torch::Tensor& x, const torch::Tensor& keys) {
  return (p.s * torch::matmul(x, keys.transpose(-1, -2))).exp();  // κ(k_j, x) = exp(s x·k_j)
}

// κ = exp((s x) keysᵀ): s on the [n, d] side, one pass less over κ.
torch::Tensor kappa_values(const torch::Tensor& x, const torch::Tensor& keys, const torch::Tensor& s) {
  return chunk_matmul(x * s, keys.transpose(-1, -2)).exp_();
}

// The operands' gradients given gk = κ̄ ⊙ κ (the adjoint of s x keysᵀ): with P = gk keys,
// x̄ = s P, keys̄ = gkᵀ (s x), s̄ = Σ_i x_i · P_i (no recomputed x keysᵀ).
struct KappaGrads {
  torch::Tensor x, keys, s;
};
KappaGrads kappa_backward(const torch::Tensor& gk, const torch::Tensor& x, const torch::Tensor& keys,
                          const torch::Tensor& s, bool need_s) {
  auto P = chunk_matmul(gk, keys);
  KappaGrads g{P * s, chunk_matmul(gk.transpose(-1, -2), x * s), torch::Tensor()};
  if (need_s) g.s = (x * P).sum(-1, true).sum_to_size(s.sizes());
  return g;
}

// κ = exp(s x keysᵀ) as one autograd node that keeps κ and the operands (views of arrays held anyway), not s·x keysᵀ:
// x̄ = (κ̄ ⊙ κ s) keys, keys̄ = (κ̄ ⊙ κ s)ᵀ x, s̄ = Σ κ̄ ⊙ κ ⊙ (x keysᵀ) = Σ_i x_i · ((κ̄ ⊙ κ) keys)_i. The chunk form's score matrices
// [chunk, past tokens] are most of what its backward holds; the composed form kept s·x keysᵀ as well.
// dot_recurrent keeps the composed kappa, so the chunk == recurrent gradient test checks this backward.
struct KappaFn : torch::autograd::Function<KappaFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& keys, const torch::Tensor& s) {
    auto k = kappa_values(x, keys, s);
    ctx->save_for_backward({x, keys, k, s});
    return k;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &keys = saved[1], &k = saved[2], &s = saved[3];
    auto r = kappa_backward(g[0] * k, x, keys, s, ctx->needs_input_grad(2));
    return {r.x, r.keys, r.s};
  }
};

torch::Tensor kappa_chunk(const DotPrep& p, const torch::Tensor& x, const torch::Tensor& keys) {
  if (!torch::GradMode::is_enabled()) return kappa_values(x, keys, p.s);
  return KappaFn::apply(x, keys, p.s);
}

// The read of the chunk-start memory, reads = κ(X, Kp) a = exp(s X Kpᵀ) a with Kp the first S0 rows of the keys
// array, as one node per chunk. Its backward forms κ̄ ⊙ κ in place on the product ḡ aᵀ, and adds the keys' gradient
// (κ̄ ⊙ κ)ᵀ (s X) into one buffer for the whole array (PrefixKeysFn): through a view per chunk, every chunk gave the
// array a zero-filled full-length gradient that the engine then added up, O(T²/b) memory traffic.
struct PrefixKeysGrad : torch::CustomClassHolder {
  torch::Tensor grad;  // [B, H, N, d], allocated by the first read's backward
};

// keys -> a scalar token that the reads take as input: the token's node runs after every read's backward (the
// engine's dependency count) and hands the accumulated buffer on as the keys' gradient.
struct PrefixKeysFn : torch::autograd::Function<PrefixKeysFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& keys,
                               c10::intrusive_ptr<PrefixKeysGrad> sink) {
    ctx->saved_data["sink"] = c10::IValue::make_capsule(sink);
    return torch::zeros({}, keys.options());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list) {
    auto sink = c10::static_intrusive_pointer_cast<PrefixKeysGrad>(ctx->saved_data["sink"].toCapsule());
    torch::Tensor g = std::move(sink->grad);  // taken: a second backward starts from zero again
    sink->grad = torch::Tensor();
    return {g, torch::Tensor()};  // undefined: no read needed it
  }
};

struct KernelReadFn : torch::autograd::Function<KernelReadFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& token, const torch::Tensor& a, const torch::Tensor& s,
                               const torch::Tensor& keys_data, int64_t S0, c10::intrusive_ptr<PrefixKeysGrad> sink) {
    auto k = kappa_values(x, keys_data.narrow(2, 0, S0), s);
    ctx->save_for_backward({x, a, s, k, keys_data});
    ctx->saved_data["S0"] = S0;
    ctx->saved_data["sink"] = c10::IValue::make_capsule(sink);
    return chunk_matmul(k, a);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &a = saved[1], &s = saved[2], &k = saved[3], &keys = saved[4];
    const int64_t S0 = ctx->saved_data["S0"].toInt();
    auto sink = c10::static_intrusive_pointer_cast<PrefixKeysGrad>(ctx->saved_data["sink"].toCapsule());
    const auto& gr = g[0];
    auto ga = chunk_matmul(k.transpose(-1, -2), gr);                                       // ā = κᵀ ḡ
    auto r = kappa_backward(chunk_matmul(gr, a.transpose(-1, -2)).mul_(k), x, keys.narrow(2, 0, S0), s, true);
    if (!sink->grad.defined()) sink->grad = torch::zeros_like(keys);
    sink->grad.narrow(2, 0, S0).add_(r.keys);
    return {r.x, torch::Tensor(), ga, r.s, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

DotResult dot_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& gamma,
                        const torch::Tensor& s, const DotState& st0, int64_t c, int64_t chunk) {
  const AutocastOff autocast_off;  // §12 rule 1: the recurrence in fp32 under bf16 autocast
  check(q, k, v, log_alpha, s, c);
  auto p = dot_prep(q, k, v, log_alpha, eta, gamma, s);
  const int64_t T = q.size(1);
  DotState st = st0;
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    st = dot_append(st, p, t, 1);
    const int64_t n = st.k.size(2), w0 = std::max<int64_t>(0, n - c), W = n - w0;
    auto Kw = st.k.narrow(2, w0, W);
    // e_i = Σ_j a^0_j κ(k_j, k_i) - v_i at the anchor, for the window i ∈ [t-c+1, t]
    auto E = torch::matmul(kappa(p, Kw, st.k), st.a0) - st.v.narrow(2, w0, W);
    auto step = p.et.narrow(2, t, 1).unsqueeze(-1) * st.g.narrow(2, w0, W).unsqueeze(-1) * (-p.s).exp() * E;
    auto a = p.la.narrow(2, t, 1).exp().unsqueeze(-1) * st.a;
    st.a = torch::cat({a.narrow(2, 0, w0), a.narrow(2, w0, W) - step}, 2);
    ys.push_back(torch::matmul(kappa(p, p.Q.narrow(2, t, 1), st.k), st.a));  // y_t = Σ_j a_j κ(k_j, q_t)
    if (++st.pos == chunk) {
      st.a0 = st.a;
      st.pos = 0;
    }
  }
  DotResult r;
  r.y = T ? torch::cat(ys, 2).transpose(1, 2).to(v.scalar_type())
          : torch::zeros({q.size(0), 0, q.size(2), v.size(3)}, v.options());
  r.state = st;
  return r;
}

DotResult dot_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& gamma,
                    const torch::Tensor& s, const DotState& st0, int64_t c, int64_t chunk) {
  const AutocastOff autocast_off;  // §12 rule 1: the recurrence in fp32 under bf16 autocast
  check(q, k, v, log_alpha, s, c);
  const int64_t T = q.size(1);
  // A state inside a chunk: finish that chunk token by token, then whole chunks.
  const int64_t head = st0.pos > 0 ? std::min(T, chunk - st0.pos) : 0;
  DotState st = st0;
  std::vector<torch::Tensor> ys;
  if (head > 0) {
    auto n = [&](const torch::Tensor& x) { return x.defined() ? x.narrow(1, 0, head) : x; };
    auto r = dot_recurrent(n(q), n(k), n(v), n(log_alpha), n(eta), n(gamma), s, st, c, chunk);
    ys.push_back(r.y.transpose(1, 2).to(recurrence_dtype(v)));
    st = r.state;
  }
  auto p = dot_prep(q, k, v, log_alpha, eta, gamma, s);
  const auto opts = p.V.options();
  // Keys, values and γ of every token up to a chunk's end are views of one array each (the carried ones, then this
  // call's): appending per chunk copied them every chunk, O(T²/b) memory kept alive by the backward.
  auto cat_rest = [&](const torch::Tensor& carried, const torch::Tensor& x) {
    auto rest = x.narrow(2, head, T - head);
    return carried.defined() ? torch::cat({carried.to(p.dt), rest}, 2) : rest;
  };
  const auto K_all = cat_rest(st.k, p.K), V_all = cat_rest(st.v, p.V), G_all = cat_rest(st.g, p.ga);
  const int64_t carried = st.k.defined() ? st.k.size(2) : 0;
  // The reads of the chunk-start memory: one node per chunk, their keys' gradients gathered in one buffer.
  const bool graph = torch::GradMode::is_enabled() && K_all.requires_grad();
  const auto sink = c10::make_intrusive<PrefixKeysGrad>();
  const auto keys_token = graph ? PrefixKeysFn::apply(K_all, sink) : torch::Tensor();
  auto read = [&](const torch::Tensor& x, int64_t S0, const torch::Tensor& a) {
    if (!graph) return torch::matmul(kappa_chunk(p, x, K_all.narrow(2, 0, S0)), a);
    return KernelReadFn::apply(x, keys_token, a, p.s, K_all.detach(), S0, sink);
  };
  for (int64_t t0 = head; t0 < T; t0 += chunk) {
    const int64_t L = std::min(chunk, T - t0);
    const int64_t S0 = st.k.defined() ? st.k.size(2) : 0;  // absolute index of the chunk start
    auto Qc = p.Q.narrow(2, t0, L);
    // Append the chunk: keys/values/γ as views, zero coefficients (st.a keeps its S0 rows until the chunk end).
    const auto zeros = torch::zeros({p.V.size(0), p.V.size(1), L, p.V.size(3)}, opts);
    const int64_t n_all = carried + (t0 - head) + L;
    st.k = K_all.narrow(2, 0, n_all);
    st.v = V_all.narrow(2, 0, n_all);
    st.g = G_all.narrow(2, 0, n_all);
    const torch::Tensor a0_start = st.a0;                                     // anchor coefficients so far
    const torch::Tensor a_prev = S0 > 0 ? st.a.to(p.dt) : torch::Tensor();  // [B, H, S0, dv]
    const int64_t i0 = std::max<int64_t>(0, S0 - c + 1), W = S0 + L - i0;  // window rows i ∈ [S0-c+1, S0+L-1]
    auto Ki = st.k.narrow(2, i0, W);
    torch::Tensor E = -st.v.narrow(2, i0, W), Yp = torch::zeros({p.V.size(0), p.V.size(1), L, p.V.size(3)}, opts);
    if (S0 > 0) {  // errors and reads of the chunk-start memory (attention over the earlier coefficients)
      // The window keys and the chunk's queries against the earlier keys in one κ and one product (one view of
      // the earlier keys, so one full-length gradient for it in the backward, not two).
      auto reads = read(torch::cat({Ki, Qc}, 2), S0, a_prev);  // [B, H, W + L, dv]
      auto parts = reads.split_with_sizes({W, L}, 2);
      E = E + parts[0];
      Yp = parts[1];
    }
    // C = L · G: L[t, n] = Π_{r=n+1}^{t} α_r, G[n, i] = η_n γ_i e^{-s} 1[i <= n <= i+c-1]   (§7.6)
    auto b = p.la.narrow(2, t0, L).cumsum(2);  // [B, H, L]
    auto tri = torch::tril(torch::ones({L, L}, torch::TensorOptions().dtype(torch::kBool).device(q.device())));
    auto Lm = torch::where(tri, (b.unsqueeze(-1) - b.unsqueeze(-2)).clamp_max(0).exp(), torch::zeros({}, opts));
    auto nabs = torch::arange(S0, S0 + L, torch::TensorOptions().dtype(torch::kLong).device(q.device())).view({L, 1});
    auto iabs = torch::arange(i0, S0 + L, nabs.options()).view({1, W});
    auto win = (iabs <= nabs) & (nabs <= iabs + c - 1);  // [L, W]
    auto Gm = torch::where(win, p.et.narrow(2, t0, L).unsqueeze(-1) * st.g.narrow(2, i0, W).unsqueeze(2),
                           torch::zeros({}, opts)) * (-p.s).exp();
    auto C = torch::matmul(Lm, Gm);  // [B, H, L, W]
    auto A = b.exp().unsqueeze(-1);  // A_t = Π_{r=s}^{t} α_r
    ys.push_back(A * Yp - torch::matmul(C * kappa_chunk(p, Qc, Ki), E));
    // chunk end: a_j ← A_end a_j, a_i ← a_i - C[end, i] e_i on the window rows [i0, S0 + L) (the chunk's own tokens
    // start at 0; scaling before appending them keeps the product's saved operand the array the read above saved
    // already). One index_add_, whose backward passes the gradient through: slicing the window out and back in gave
    // every chunk two full-length zero-filled gradient copies.
    auto a = S0 > 0 ? torch::cat({A.select(2, L - 1).unsqueeze(-1) * a_prev, zeros}, 2) : torch::zeros_like(zeros);
    const auto window_rows = torch::arange(i0, S0 + L, torch::TensorOptions().dtype(torch::kLong).device(q.device()));
    st.a = a.index_add_(2, window_rows, C.select(2, L - 1).unsqueeze(-1) * E, /*alpha=*/-1);
    st.pos = (L == chunk) ? 0 : L;
    // a0: at a chunk end the coefficients; inside a chunk those at its start, the new tokens' at 0
    st.a0 = st.pos == 0 ? st.a : cat_or(a0_start.defined() ? a0_start.to(p.dt) : torch::Tensor(), zeros);
  }
  DotResult r;
  r.y = T ? torch::cat(ys, 2).transpose(1, 2).to(v.scalar_type())
          : torch::zeros({q.size(0), 0, q.size(2), v.size(3)}, v.options());
  r.state = st;
  return r;
}

}  // namespace mnemo
