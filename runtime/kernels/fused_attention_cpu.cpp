// Fused softmax attention on the CPU (runtime/kernels/fused_cpu.h): one task per (batch, head) keeps its
// queries, keys, scores and probabilities in cache, where eager LibTorch writes the [B, H, Tq, Tk] logits and
// reads them back once per op (scale, mask, softmax; and as many in the backward).
//
// Queries go in blocks of kBlock rows; a block sees the keys [lo, hi) that any of its rows sees, and only those
// columns of S = scale · Q Kᵀ are computed (causal: about half of QKᵀ and PV). Per row i, with its visible keys
// [lo_i, hi_i): P_ij = exp(S_ij − max_j S_ij) / Σ_j exp(S_ij − max), 0 elsewhere; O = P V.
// The probabilities of every block are kept for the backward (the eager path keeps the softmax output too):
//   D_i = Σ_d dO_id O_id,  dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ⊙ (dP − D),  dQ = scale · dS K,  dK = scale · dSᵀ Q.
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <cmath>
#include <vector>

#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/fused_cpu_math.h"

namespace mnemo {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace fused_cpu;

namespace {

constexpr int64_t kBlock = 64;  // query rows per block

// Which keys each query sees, and the query blocks with their key ranges and the offsets of their probabilities.
struct Geometry {
  int64_t Tq, Tk, q_offset, k_offset, window, r;  // r keys per position (window 0 when r > 1)
  int64_t key_lo(int64_t i) const {
    return window > 0 ? std::max<int64_t>(0, q_offset + i - window + 1 - k_offset) : 0;
  }
  int64_t key_hi(int64_t i) const {
    return std::max<int64_t>(0, std::min<int64_t>(Tk, r * (q_offset + i + 1) - k_offset));
  }
};

struct QueryBlock {
  int64_t i0, i1, lo, hi, p_offset;  // rows [i0, i1), keys [lo, hi), P block at p_offset (ld = hi − lo)
};

std::vector<QueryBlock> plan_blocks(const Geometry& g, int64_t* p_size) {
  std::vector<QueryBlock> blocks;
  int64_t offset = 0;
  for (int64_t i0 = 0; i0 < g.Tq; i0 += kBlock) {
    const int64_t i1 = std::min(g.Tq, i0 + kBlock);
    const int64_t lo = g.key_lo(i0), hi = g.key_hi(i1 - 1);  // both non-decreasing in i
    blocks.push_back({i0, i1, lo, hi, offset});
    offset += (i1 - i0) * (hi - lo);
  }
  *p_size = offset;
  return blocks;
}

// [B, H, T, D] with a unit last stride: the matrix of (b, h) starts at b s0 + h s1, rows s2 apart.
struct HeadMatrix {
  int64_t s0, s1, s2;
  explicit HeadMatrix(const torch::Tensor& t) : s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)) {}
  int64_t at(int64_t b, int64_t h, int64_t row) const { return b * s0 + h * s1 + row * s2; }
};

// Softmax of the rows of a block of scores S (rows × width, ld = width) over each row's visible columns
// [c0, c1) (given per row by the geometry), in place; the other columns become 0.
template <typename T>
MNEMO_INLINE void softmax_block(T* S, int64_t rows, int64_t width, const Geometry& g, const QueryBlock& blk) {
  const ExpBounds bounds = opaque_bounds();
  for (int64_t r = 0; r < rows; ++r) {
    T* s = S + r * width;
    const int64_t c0 = g.key_lo(blk.i0 + r) - blk.lo, c1 = g.key_hi(blk.i0 + r) - blk.lo;
    for (int64_t j = 0; j < c0; ++j) s[j] = 0;
    for (int64_t j = c1; j < width; ++j) s[j] = 0;
    T* v = s + c0;
    const int64_t n = c1 - c0;
    const T m = max_of(v, n);
    T acc[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        v[j + l] = fast_exp(v[j + l] - m, bounds);
        acc[l] += v[j + l];
      }
    T sum = 0;
    for (int l = 0; l < kLanes; ++l) sum += acc[l];
    for (; j < n; ++j) {
      v[j] = fast_exp(v[j] - m, bounds);
      sum += v[j];
    }
    const T inv = T(1) / sum;
    for (j = 0; j < n; ++j) v[j] *= inv;
  }
}
MNEMO_SIMD_CLONES void softmax_block_f(float* S, int64_t rows, int64_t width, const Geometry& g,
                                       const QueryBlock& blk) {
  softmax_block(S, rows, width, g, blk);
}
MNEMO_SIMD_CLONES void softmax_block_d(double* S, int64_t rows, int64_t width, const Geometry& g,
                                       const QueryBlock& blk) {
  softmax_block(S, rows, width, g, blk);
}
void softmax_block_any(float* S, int64_t rows, int64_t width, const Geometry& g, const QueryBlock& blk) {
  softmax_block_f(S, rows, width, g, blk);
}
void softmax_block_any(double* S, int64_t rows, int64_t width, const Geometry& g, const QueryBlock& blk) {
  softmax_block_d(S, rows, width, g, blk);
}

// dS = P ⊙ (dP − D_r) in place on dP (rows × width), D_r = Σ_d dO_rd O_rd.
template <typename T>
MNEMO_INLINE void softmax_grad_block(const T* P, T* dP, int64_t rows, int64_t width, const T* dO, int64_t ldo,
                                     const T* O, int64_t ldO, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    const T d = dot(dO + r * ldo, O + r * ldO, D);
    const T* p = P + r * width;
    T* dp = dP + r * width;
    for (int64_t j = 0; j < width; ++j) dp[j] = p[j] * (dp[j] - d);
  }
}
MNEMO_SIMD_CLONES void softmax_grad_block_f(const float* P, float* dP, int64_t rows, int64_t width, const float* dO,
                                            int64_t ldo, const float* O, int64_t ldO, int64_t D) {
  softmax_grad_block(P, dP, rows, width, dO, ldo, O, ldO, D);
}
MNEMO_SIMD_CLONES void softmax_grad_block_d(const double* P, double* dP, int64_t rows, int64_t width,
                                            const double* dO, int64_t ldo, const double* O, int64_t ldO, int64_t D) {
  softmax_grad_block(P, dP, rows, width, dO, ldo, O, ldO, D);
}
void softmax_grad_any(const float* P, float* dP, int64_t rows, int64_t width, const float* dO, int64_t ldo,
                      const float* O, int64_t ldO, int64_t D) {
  softmax_grad_block_f(P, dP, rows, width, dO, ldo, O, ldO, D);
}
void softmax_grad_any(const double* P, double* dP, int64_t rows, int64_t width, const double* dO, int64_t ldo,
                      const double* O, int64_t ldO, int64_t D) {
  softmax_grad_block_d(P, dP, rows, width, dO, ldo, O, ldO, D);
}

// The logit bias of one head: S_ij += bq_i − bk_j (forgetting attention's c_i − c_j); null pointers: none.
template <typename T>
struct HeadBias {
  const T* q = nullptr;  // [Tq] of the head
  const T* k = nullptr;  // [Tk] of the head
};

// Forward of one query block of head (b, h): S → P (into P_blk), O rows = P V.
template <typename T>
void forward_block(const T* q, HeadMatrix qm, const T* k, HeadMatrix km, const T* v, HeadMatrix vm, T* o,
                   HeadMatrix om, int64_t b, int64_t h, int64_t D, T scale, const Geometry& g,
                   const QueryBlock& blk, T* P_blk, HeadBias<T> bias) {
  const int64_t rows = blk.i1 - blk.i0, width = blk.hi - blk.lo;
  gemm<T>(false, true, rows, width, D, scale, q + qm.at(b, h, blk.i0), qm.s2, k + km.at(b, h, blk.lo), km.s2, T(0),
          P_blk, width);
  if (bias.q)
    for (int64_t r = 0; r < rows; ++r) {
      T* s = P_blk + r * width;
      const T bq = bias.q[blk.i0 + r];
      const T* bk = bias.k + blk.lo;
      for (int64_t j = 0; j < width; ++j) s[j] += bq - bk[j];
    }
  softmax_block_any(P_blk, rows, width, g, blk);
  gemm<T>(false, false, rows, D, width, T(1), P_blk, width, v + vm.at(b, h, blk.lo), vm.s2, T(0),
          o + om.at(b, h, blk.i0), om.s2);
}

torch::Tensor attention_eager(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& bias_q, const torch::Tensor& bias_k, const Geometry& g) {
  auto opts = torch::TensorOptions().dtype(torch::kInt64);
  auto qpos = torch::arange(g.q_offset, g.q_offset + g.Tq, opts).unsqueeze(1);
  auto kpos = torch::arange(g.k_offset, g.k_offset + g.Tk, opts).unsqueeze(0);
  auto visible = kpos < g.r * (qpos + 1);
  if (g.window > 0) visible = visible & (kpos > qpos - g.window);
  auto logits = torch::matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (bias_q.defined()) logits = logits + bias_q.unsqueeze(-1) - bias_k.unsqueeze(-2);
  logits = logits.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(logits, -1), v);
}

// The forward and backward shared by the two autograd nodes below (with and without the logit bias: an undefined
// tensor cannot be an input of a LibTorch 1.13 autograd Function). The backward returns [dq, dk, dv, dbias_q,
// dbias_k], the bias gradients undefined without a bias.
struct AttentionKernel {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in, const torch::Tensor& k_in,
                               const torch::Tensor& v_in, const torch::Tensor& bias_q_in,
                               const torch::Tensor& bias_k_in, int64_t q_offset, int64_t k_offset, int64_t window,
                               int64_t r) {
    RECORD_FUNCTION("mnemo::fused_attention", std::vector<c10::IValue>());
    auto q = unit_last_stride(q_in), k = unit_last_stride(k_in), v = unit_last_stride(v_in);
    const bool biased = bias_q_in.defined();
    const auto bias_q = biased ? bias_q_in.contiguous() : torch::Tensor();
    const auto bias_k = biased ? bias_k_in.contiguous() : torch::Tensor();
    const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2);
    const Geometry g{Tq, Tk, q_offset, k_offset, window, r};
    int64_t p_size = 0;
    const auto blocks = plan_blocks(g, &p_size);
    const int64_t nb = static_cast<int64_t>(blocks.size());
    // Output in [B, Tq, H, D] memory: the mixer's transpose(1, 2).reshape after it is then free.
    auto o = torch::empty({B, Tq, H, D}, q.options()).transpose(1, 2);
    const bool save = ctx != nullptr;
    auto P = save ? torch::empty({B * H, p_size}, q.options()) : torch::Tensor();
    const HeadMatrix qm(q), km(k), vm(v), om(o);
    const auto dtype = q.scalar_type();
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    auto run = [&](auto zero) {
      using T = decltype(zero);
      const T *pq = q.data_ptr<T>(), *pk = k.data_ptr<T>(), *pv = v.data_ptr<T>();
      T* po = o.data_ptr<T>();
      T* pP = save ? P.data_ptr<T>() : nullptr;
      const T* pbq = biased ? bias_q.data_ptr<T>() : nullptr;
      const T* pbk = biased ? bias_k.data_ptr<T>() : nullptr;
      // Tasks (b, h, block): blocks are independent in the forward.
      at::parallel_for(0, B * H * nb, 1, [&](int64_t t0, int64_t t1) {
        std::vector<T> scratch;
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t bh = t / nb;
          const QueryBlock& blk = blocks[t % nb];
          T* P_blk = pP ? pP + bh * p_size + blk.p_offset : nullptr;
          if (!P_blk) {
            scratch.resize((blk.i1 - blk.i0) * (blk.hi - blk.lo));
            P_blk = scratch.data();
          }
          const HeadBias<T> bias = biased ? HeadBias<T>{pbq + bh * Tq, pbk + bh * Tk} : HeadBias<T>{};
          forward_block<T>(pq, qm, pk, km, pv, vm, po, om, bh / H, bh % H, D, static_cast<T>(scale), g, blk, P_blk,
                           bias);
        }
      });
    };
    if (dtype == torch::kFloat32) run(0.f);
    else run(0.0);
    if (save) {
      ctx->save_for_backward({q_in, k_in, v_in, q, k, v, o, P, bias_q_in, bias_k_in});
      ctx->saved_data["q_offset"] = q_offset;
      ctx->saved_data["k_offset"] = k_offset;
      ctx->saved_data["window"] = window;
      ctx->saved_data["r"] = r;
    }
    return o;
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grads) {
    const auto s = ctx->get_saved_variables();
    const auto &q = s[3], &k = s[4], &v = s[5], &o = s[6], &P = s[7], &bias_q_in = s[8], &bias_k_in = s[9];
    const bool biased = bias_q_in.defined();
    const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2);
    const Geometry g{Tq, Tk, ctx->saved_data["q_offset"].toInt(), ctx->saved_data["k_offset"].toInt(),
                     ctx->saved_data["window"].toInt(), ctx->saved_data["r"].toInt()};
    if (torch::GradMode::is_enabled()) {  // create_graph: differentiate the eager formula
      if (!biased) {
        auto r = reference_backward(
            [&](const std::vector<torch::Tensor>& in) { return attention_eager(in[0], in[1], in[2], {}, {}, g); },
            {s[0], s[1], s[2]}, grads[0]);
        return {r[0], r[1], r[2], {}, {}};
      }
      auto r = reference_backward(
          [&](const std::vector<torch::Tensor>& in) { return attention_eager(in[0], in[1], in[2], in[3], in[4], g); },
          {s[0], s[1], s[2], bias_q_in, bias_k_in}, grads[0]);
      return {r[0], r[1], r[2], r[3], r[4]};
    }
    auto dO = unit_last_stride(grads[0]);
    int64_t p_size = 0;
    const auto blocks = plan_blocks(g, &p_size);
    auto dq = empty_like_layout(q), dk = empty_like_layout(k), dv = empty_like_layout(v);
    // The bias gradients: dbk_j = −Σ_i dS_ij (dS: the gradient of the logits); dbq_i = Σ_j dS_ij is exactly 0,
    // a softmax being unchanged by a constant added to its row, so it is returned as zeros, not rounding residue.
    auto dbq = biased ? torch::zeros({B, H, Tq}, q.options()) : torch::Tensor();
    auto dbk = biased ? torch::zeros({B, H, Tk}, q.options()) : torch::Tensor();
    const HeadMatrix qm(q), km(k), vm(v), om(o), dom(dO), dqm(dq), dkm(dk), dvm(dv);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    auto run = [&](auto zero) {
      using T = decltype(zero);
      const T *pq = q.data_ptr<T>(), *pk = k.data_ptr<T>(), *pv = v.data_ptr<T>(), *po = o.data_ptr<T>(),
              *pP = P.data_ptr<T>(), *pdo = dO.data_ptr<T>();
      T *pdq = dq.data_ptr<T>(), *pdk = dk.data_ptr<T>(), *pdv = dv.data_ptr<T>();
      T* pdbk = biased ? dbk.data_ptr<T>() : nullptr;
      const T sc = static_cast<T>(scale);
      // Tasks (b, h): dK and dV sum over the query blocks.
      at::parallel_for(0, B * H, 1, [&](int64_t t0, int64_t t1) {
        std::vector<T> dS;
        for (int64_t bh = t0; bh < t1; ++bh) {
          const int64_t b = bh / H, h = bh % H;
          for (int64_t j = 0; j < Tk; ++j) {
            std::fill_n(pdk + dkm.at(b, h, j), D, T(0));
            std::fill_n(pdv + dvm.at(b, h, j), D, T(0));
          }
          for (const QueryBlock& blk : blocks) {
            const int64_t rows = blk.i1 - blk.i0, width = blk.hi - blk.lo;
            const T* P_blk = pP + bh * p_size + blk.p_offset;
            const T *dO_b = pdo + dom.at(b, h, blk.i0), *q_b = pq + qm.at(b, h, blk.i0);
            const T *k_b = pk + km.at(b, h, blk.lo), *v_b = pv + vm.at(b, h, blk.lo);
            if (width == 0) {
              for (int64_t r = 0; r < rows; ++r) std::fill_n(pdq + dqm.at(b, h, blk.i0 + r), D, T(0));
              continue;
            }
            gemm<T>(true, false, width, D, rows, T(1), P_blk, width, dO_b, dom.s2, T(1), pdv + dvm.at(b, h, blk.lo),
                    dvm.s2);  // dV += Pᵀ dO
            dS.resize(rows * width);
            gemm<T>(false, true, rows, width, D, T(1), dO_b, dom.s2, v_b, vm.s2, T(0), dS.data(), width);  // dP
            softmax_grad_any(P_blk, dS.data(), rows, width, dO_b, dom.s2, po + om.at(b, h, blk.i0), om.s2, D);
            if (biased) {
              T* dbk_h = pdbk + bh * Tk + blk.lo;
              for (int64_t r = 0; r < rows; ++r) {
                const T* ds = dS.data() + r * width;
                for (int64_t j = 0; j < width; ++j) dbk_h[j] -= ds[j];
              }
            }
            gemm<T>(false, false, rows, D, width, sc, dS.data(), width, k_b, km.s2, T(0), pdq + dqm.at(b, h, blk.i0),
                    dqm.s2);  // dQ = scale dS K
            gemm<T>(true, false, width, D, rows, sc, dS.data(), width, q_b, qm.s2, T(1), pdk + dkm.at(b, h, blk.lo),
                    dkm.s2);  // dK += scale dSᵀ Q
          }
        }
      });
    };
    if (q.scalar_type() == torch::kFloat32) run(0.f);
    else run(0.0);
    return {dq, dk, dv, dbq, dbk};
  }
};

struct AttentionFn : torch::autograd::Function<AttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t q_offset, int64_t k_offset, int64_t window, int64_t r) {
    return AttentionKernel::forward(ctx, q, k, v, {}, {}, q_offset, k_offset, window, r);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto g = AttentionKernel::backward(ctx, grads);
    return {g[0], g[1], g[2], {}, {}, {}, {}};
  }
};

struct BiasedAttentionFn : torch::autograd::Function<BiasedAttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& bias_q, const torch::Tensor& bias_k,
                               int64_t q_offset, int64_t k_offset, int64_t window, int64_t r) {
    return AttentionKernel::forward(ctx, q, k, v, bias_q, bias_k, q_offset, k_offset, window, r);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto g = AttentionKernel::backward(ctx, grads);
    return {g[0], g[1], g[2], g[3], g[4], {}, {}, {}, {}};
  }
};

}  // namespace

bool fused_attention_supported(int64_t Tq, int64_t Tk, int64_t q_offset, int64_t k_offset, int64_t window,
                               int64_t keys_per_step) {
  if (keys_per_step < 1 || (keys_per_step > 1 && window > 0)) return false;
  const Geometry g{Tq, Tk, q_offset, k_offset, window, keys_per_step};
  for (int64_t i = 0; i < Tq; ++i)
    if (g.key_hi(i) <= g.key_lo(i)) return false;
  return true;
}

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              int64_t q_offset, int64_t k_offset, int64_t window, int64_t keys_per_step,
                              const torch::Tensor& bias_q, const torch::Tensor& bias_k) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.sizes() == v.sizes() && q.size(0) == k.size(0) &&
                  q.size(1) == k.size(1) && q.size(3) == k.size(3),
              "fused_attention: q [B, H, Tq, D], k and v [B, H, Tk, D]");
  TORCH_CHECK(bias_q.defined() == bias_k.defined() &&
                  (!bias_q.defined() || (bias_q.dim() == 3 && bias_q.size(0) == q.size(0) &&
                                         bias_q.size(1) == q.size(1) && bias_q.size(2) == q.size(2) &&
                                         bias_k.dim() == 3 && bias_k.size(0) == k.size(0) &&
                                         bias_k.size(1) == k.size(1) && bias_k.size(2) == k.size(2) &&
                                         bias_q.scalar_type() == q.scalar_type() &&
                                         bias_k.scalar_type() == q.scalar_type())),
              "fused_attention: bias_q [B, H, Tq] and bias_k [B, H, Tk] of q's dtype, both or neither");
  const bool grad = torch::GradMode::is_enabled() &&
                    (q.requires_grad() || k.requires_grad() || v.requires_grad() ||
                     (bias_q.defined() && (bias_q.requires_grad() || bias_k.requires_grad())));
  TORCH_CHECK(keys_per_step >= 1 && (keys_per_step == 1 || window == 0),
              "fused_attention: keys_per_step >= 1, and window 0 when keys_per_step > 1");
  if (!grad) return AttentionKernel::forward(nullptr, q, k, v, bias_q, bias_k, q_offset, k_offset, window, keys_per_step);
  if (bias_q.defined())
    return BiasedAttentionFn::apply(q, k, v, bias_q, bias_k, q_offset, k_offset, window, keys_per_step);
  return AttentionFn::apply(q, k, v, q_offset, k_offset, window, keys_per_step);
}

}  // namespace mnemo
