// DOT kernel (see kernel_memory.h; docs/models.md#deeptransformers-swdt-and-dot, docs/models.md#dla-swla-and-omeganet,
// docs/models.md#numerical-stability): the kernel-form Omega rule chunk-wise, with its κ and chunk-start reads as
// autograd nodes of their own. The token-by-token form is naive.cpp.
#include <limits>
#include <vector>

#include "core/common.h"
#include "runtime/deep_transformer/kernel_memory.h"
#include "runtime/deep_transformer/kernel_read_cpu.h"
#include "runtime/deep_transformer/prepare.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"

namespace mnemo {

namespace deep_transformer_detail {
namespace {

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

torch::Tensor kappa_chunk(const torch::Tensor& x, const torch::Tensor& keys, const torch::Tensor& s) {
  if (!torch::GradMode::is_enabled()) return kappa_values(x, keys, s);
  return KappaFn::apply(x, keys, s);
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
    const bool cpu = kernel_read_cpu::eligible(x, keys_data, a, s);
    ctx->saved_data["S0"] = S0;
    ctx->saved_data["sink"] = c10::IValue::make_capsule(sink);
    ctx->saved_data["cpu"] = cpu;
    if (cpu) {  // the CPU form: κ's tiles exp'd and read while in cache
      auto f = kernel_read_cpu::forward(x, keys_data, S0, a, s);
      ctx->save_for_backward({x, a, s, f.kappa, keys_data});
      return f.reads;
    }
    auto k = kappa_values(x, keys_data.narrow(2, 0, S0), s);
    ctx->save_for_backward({x, a, s, k, keys_data});
    return chunk_matmul(k, a);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &a = saved[1], &s = saved[2], &k = saved[3], &keys = saved[4];
    const int64_t S0 = ctx->saved_data["S0"].toInt();
    auto sink = c10::static_intrusive_pointer_cast<PrefixKeysGrad>(ctx->saved_data["sink"].toCapsule());
    const auto& gr = g[0];
    if (!sink->grad.defined()) sink->grad = torch::zeros_like(keys);
    if (ctx->saved_data["cpu"].toBool() && !torch::GradMode::is_enabled()) {
      auto r = kernel_read_cpu::backward(gr, x, keys, S0, a, s, k, sink->grad);
      return {r.x, torch::Tensor(), r.a, r.s, torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    auto ga = chunk_matmul(k.transpose(-1, -2), gr);                                       // ā = κᵀ ḡ
    auto r = kappa_backward(chunk_matmul(gr, a.transpose(-1, -2)).mul_(k), x, keys.narrow(2, 0, S0), s, true);
    sink->grad.narrow(2, 0, S0).add_(r.keys);
    return {r.x, torch::Tensor(), ga, r.s, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// A chunk's terms that do not depend on the memory, computed for every chunk at once ([B, H, n, ...], then unbound:
// one node each, so no per-chunk view of a whole array hands the backward a full-length gradient); the chunk loop
// keeps the reads, the errors and the coefficient update. Window rows i ∈ [S0-c+1, S0+L): W = L + c - 1 rows, zero
// before the first token, where γ = 0 makes C vanish.
struct DotPiece {
  torch::Tensor X;       // [B, H, W + L, d]: the window keys, then the chunk's queries
  torch::Tensor Vw;      // [B, H, W, dv]: the window values
  torch::Tensor Ckappa;  // [B, H, L, W]: C ⊙ κ(k_i, q_t),  C = L · G (docs/models.md#dla-swla-and-omeganet)
  torch::Tensor C_end;   // [B, H, W, 1]: C[end, i]
  torch::Tensor A;       // [B, H, L, 1]: A_t = Π_{r=S0}^{t} α_r
  torch::Tensor b_end;   // [B, H, 1, 1]: log A_end
};

std::vector<DotPiece> dot_pieces(const DotPrep& p, const torch::Tensor& K_all, const torch::Tensor& V_all,
                                 const torch::Tensor& G_all, int64_t head, int64_t carried, int64_t c, int64_t chunk) {
  const int64_t rest = p.Q.size(2) - head, full = rest / chunk, tail = rest % chunk;
  auto pad = [&](const torch::Tensor& x) {  // c - 1 zero rows before the first token
    auto sz = x.sizes().vec();
    sz[2] = c - 1;
    return c > 1 ? torch::cat({torch::zeros(sz, x.options()), x}, 2) : x;
  };
  const auto Kp = pad(K_all), Vp = pad(V_all), Gp = pad(G_all);  // chunk at S0: window = padded rows [S0, S0 + W)
  const auto s5 = p.s.unsqueeze(-1);                                // [1, H, 1, 1, 1]
  const auto bool_opts = torch::TensorOptions().dtype(torch::kBool).device(p.Q.device());
  std::vector<DotPiece> out;
  auto terms = [&](int64_t S0, int64_t n, int64_t L) {  // n chunks of L tokens from absolute index S0
    const int64_t W = L + c - 1, t0 = head + (S0 - carried);
    auto rows = [&](const torch::Tensor& x, int64_t from) {  // rows [from, from + nL) as [B, H, n, L, (d)]
      auto sz = x.sizes().vec();
      sz[2] = L;
      sz.insert(sz.begin() + 2, n);
      return x.narrow(2, from, n * L).reshape(sz);
    };
    // The window: the c - 1 rows before the chunk (the first rows of the padded array's blocks), then the chunk. As
    // views and one cat; unfold's backward cost ~10 ms a call.
    auto win = [&](const torch::Tensor& x) {  // padded [B, H, N + c - 1, (d)] -> [B, H, n, W, (d)]
      if (n == 1) return x.narrow(2, S0, W).unsqueeze(2);
      if (L < c - 1) {
        auto u = x.narrow(2, S0, (n - 1) * L + W).unfold(2, W, L);
        return x.dim() == 4 ? u.transpose(-1, -2) : u;
      }
      return torch::cat({rows(x, S0).narrow(3, 0, c - 1), rows(x, S0 + c - 1)}, 3);
    };
    auto Qn = rows(p.Q, t0), et = rows(p.et, t0), Kw = win(Kp), Vw = win(Vp), gw = win(Gp);
    auto b = rows(p.la, t0).cumsum(-1);  // [B, H, n, L]
    // C = L · G: L[t, n] = Π_{r=n+1}^{t} α_r, G[n, i] = η_n γ_i e^{-s} 1[i <= n <= i+c-1]   (docs/models.md#dla-swla-and-omeganet)
    auto tri = torch::tril(torch::ones({L, L}, bool_opts));
    auto Lm = torch::where(tri, (b.unsqueeze(-1) - b.unsqueeze(-2)).clamp_max(0).exp(), torch::zeros({}, b.options()));
    auto tpos = torch::arange(L, bool_opts.dtype(torch::kLong)).view({L, 1});
    auto rpos = torch::arange(W, tpos.options()).view({1, W}) - (c - 1);  // window row i - S0
    auto band = (rpos <= tpos) & (tpos <= rpos + c - 1);                   // [L, W]
    auto Gm = torch::where(band, et.unsqueeze(-1) * gw.unsqueeze(-2), torch::zeros({}, b.options())) * (-s5).exp();
    auto C = torch::matmul(Lm, Gm);  // [B, H, n, L, W]
    auto kappa_qk = kappa_chunk(Qn, Kw, s5);
    auto X = torch::cat({Kw, Qn}, -2).unbind(2), Vs = Vw.unbind(2), Ck = (C * kappa_qk).unbind(2),
         Ce = C.select(-2, L - 1).unsqueeze(-1).unbind(2), A = b.exp().unsqueeze(-1).unbind(2),
         Be = b.narrow(-1, L - 1, 1).unsqueeze(-1).unbind(2);
    for (int64_t m = 0; m < n; ++m) out.push_back({X[m], Vs[m], Ck[m], Ce[m], A[m], Be[m]});
  };
  if (full > 0) terms(carried, full, chunk);
  if (tail > 0) terms(carried + full * chunk, 1, tail);
  return out;
}

}  // namespace
}  // namespace deep_transformer_detail

DotResult dot_chunk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& log_alpha, const torch::Tensor& eta, const torch::Tensor& gamma,
                    const torch::Tensor& s, const DotState& st0, int64_t c, int64_t chunk) {
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  using deep_transformer_detail::cat_or, deep_transformer_detail::check, deep_transformer_detail::dot_pieces,
      deep_transformer_detail::dot_prep, deep_transformer_detail::kappa_chunk, deep_transformer_detail::KernelReadFn,
      deep_transformer_detail::PrefixKeysFn, deep_transformer_detail::PrefixKeysGrad;
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
  // Keys, values and γ of every token so far are one array each (the carried ones, then this call's).
  auto cat_rest = [&](const torch::Tensor& carried, const torch::Tensor& x) {
    auto rest = x.narrow(2, head, T - head);
    return carried.defined() ? torch::cat({carried.to(p.dt), rest}, 2) : rest;
  };
  const auto K_all = cat_rest(st.k, p.K), V_all = cat_rest(st.v, p.V), G_all = cat_rest(st.g, p.ga);
  const int64_t carried = st.k.defined() ? st.k.size(2) : 0;
  const auto pieces = dot_pieces(p, K_all, V_all, G_all, head, carried, c, chunk);
  // The reads of the chunk-start memory: one node per chunk, their keys' gradients gathered in one buffer.
  const bool graph = torch::GradMode::is_enabled() && K_all.requires_grad();
  const auto sink = c10::make_intrusive<PrefixKeysGrad>();
  const auto keys_token = graph ? PrefixKeysFn::apply(K_all, sink) : torch::Tensor();
  auto read = [&](const torch::Tensor& x, int64_t S0, const torch::Tensor& a) {
    if (!graph) return torch::matmul(kappa_chunk(x, K_all.narrow(2, 0, S0), p.s), a);
    return KernelReadFn::apply(x, keys_token, a, p.s, K_all.detach(), S0, sink);
  };
  // Coefficients relative to a decay scale (docs/models.md#dla-swla-and-omeganet decays factored out): a = e^ρ ã, ρ [B, H, 1, 1]. A chunk end
  // multiplies every earlier coefficient by A_end; here it adds log A_end to ρ and leaves ã alone, so the O(S0) array
  // is not rescaled (forward and backward) at every chunk: reads = e^ρ κ ã, and the window update enters ã as
  // e^{-ρ} C e. Where ρ would fall below -kRescale, ã takes e^ρ once and ρ restarts at 0, which bounds e^{-ρ}.
  constexpr double kRescale = 30.0;
  torch::Tensor rel = st.a.defined() ? st.a.to(p.dt) : torch::Tensor(), rho;  // ã; ρ undefined = 0
  auto actual = [](const torch::Tensor& r, const torch::Tensor& lr) { return lr.defined() ? r * lr.exp() : r; };
  torch::Tensor start_rel, start_rho;  // ã, ρ at the start of the last chunk (the anchor of a partial one)
  int64_t S0 = carried;                // absolute index of the chunk start
  for (const auto& pc : pieces) {
    const int64_t L = pc.A.size(2), W = L + c - 1;
    start_rel = rel;
    start_rho = rho;
    torch::Tensor E, y;
    if (S0 > 0) {  // errors and reads of the chunk-start memory (attention over the earlier coefficients)
      // The window keys and the chunk's queries against the earlier keys in one κ and one product.
      auto parts = actual(read(pc.X, S0, rel), rho).split_with_sizes({W, L}, 2);  // [B, H, W + L, dv]
      E = parts[0] - pc.Vw;
      y = pc.A * parts[1] - chunk_matmul(pc.Ckappa, E);
    } else {
      E = -pc.Vw;
      y = chunk_matmul(pc.Ckappa, pc.Vw);
    }
    ys.push_back(y);
    // chunk end: a_j ← A_end a_j, a_i ← a_i - C[end, i] e_i on the window rows (the chunk's own tokens start at 0).
    // In ã: ρ ← ρ + log A_end, ã_i ← ã_i - e^{-ρ} C[end, i] e_i. One index_add_, whose backward passes the gradient
    // through: slicing the window out and back in gave every chunk two full-length gradient copies.
    const int64_t skip = std::max<int64_t>(0, c - 1 - S0);  // window rows before the first token (zero padding)
    auto rho_end = rho.defined() ? rho + pc.b_end : pc.b_end;
    auto update = (pc.C_end * E).narrow(2, skip, W - skip);  // C[end, i] e_i
    const auto zeros = torch::zeros({p.V.size(0), p.V.size(1), L, p.V.size(3)}, opts);
    torch::Tensor grown;
    if (S0 > 0 && rho_end.min().item<double>() >= -kRescale) {
      update = update * (-rho_end).exp();
      grown = torch::cat({rel, zeros}, 2);
      rho = rho_end;
    } else {  // ρ restarts at 0: ã takes e^{ρ_end}
      grown = S0 > 0 ? torch::cat({rel * rho_end.exp(), zeros}, 2) : zeros;
      rho = torch::Tensor();
    }
    const auto rows =
        torch::arange(S0 - (c - 1) + skip, S0 + L, torch::TensorOptions().dtype(torch::kLong).device(q.device()));
    rel = grown.index_add_(2, rows, update, /*alpha=*/-1);
    S0 += L;
    st.pos = (L == chunk) ? 0 : L;
  }
  if (!pieces.empty()) {
    st.k = K_all;
    st.v = V_all;
    st.g = G_all;
    st.a = actual(rel, rho);
    // a0: at a chunk end the coefficients; inside a chunk those at its start, the new tokens' at 0
    st.a0 = st.pos == 0 ? st.a
                        : cat_or(start_rel.defined() ? actual(start_rel, start_rho) : torch::Tensor(),
                                 torch::zeros({p.V.size(0), p.V.size(1), st.pos, p.V.size(3)}, opts));
  }
  DotResult r;
  r.y = T ? torch::cat(ys, 2).transpose(1, 2).to(v.scalar_type())
          : torch::zeros({q.size(0), 0, q.size(2), v.size(3)}, v.options());
  r.state = st;
  return r;
}

}  // namespace mnemo
