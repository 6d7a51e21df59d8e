#include "runtime/kernels/chunking.h"

#include <climits>
#include <sstream>

#include "runtime/kernels/fortran_blas.h"

namespace mnemo {

static std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s << ",";
    if (shape[i] < 0) s << "*"; else s << shape[i];
  }
  s << "]";
  return s.str();
}

void check_shape(const std::string& op, const std::string& name, const torch::Tensor& t,
                 const std::vector<int64_t>& shape) {
  if (!t.defined()) throw Error(op + ": input '" + name + "' is missing");
  bool ok = t.dim() == static_cast<int64_t>(shape.size());
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || t.size(i) == shape[i];
  if (!ok)
    throw Error(op + ": input '" + name + "' must have shape " + shape_string(shape) + " but has " +
                shape_string(t.sizes().vec()));
}

void check_chunking(const std::string& op, int64_t T, int64_t chunk_size) {
  if (T < 1) throw Error(op + ": sequence length must be >= 1, got " + std::to_string(T));
  if (chunk_size < 1) throw Error(op + ": chunk_size must be >= 1, got " + std::to_string(chunk_size));
}

torch::Tensor pad_time(const torch::Tensor& x, int64_t chunk) {
  const int64_t T = x.size(1), pad = (chunk - T % chunk) % chunk;
  if (pad == 0) return x;
  auto shape = x.sizes().vec();
  shape[1] = pad;
  return torch::cat({x, torch::zeros(shape, x.options())}, 1);
}

torch::Tensor to_chunks(const torch::Tensor& x, int64_t chunk) {
  auto p = pad_time(x, chunk);
  auto shape = p.sizes().vec();  // [B, Tp, H, rest...]
  std::vector<int64_t> split = {shape[0], shape[1] / chunk, chunk};
  split.insert(split.end(), shape.begin() + 2, shape.end());  // [B, N, C, H, rest...]
  auto y = p.reshape(split);
  std::vector<int64_t> perm = {0, 3, 1, 2};
  for (int64_t d = 4; d < y.dim(); ++d) perm.push_back(d);
  return y.permute(perm).contiguous();  // [B, H, N, C, rest...]
}

torch::Tensor from_chunks(const torch::Tensor& y, int64_t T) {
  std::vector<int64_t> perm = {0, 2, 3, 1};
  for (int64_t d = 4; d < y.dim(); ++d) perm.push_back(d);
  auto p = y.permute(perm);  // [B, N, C, H, rest...]
  auto shape = p.sizes().vec();
  std::vector<int64_t> merged = {shape[0], shape[1] * shape[2]};
  merged.insert(merged.end(), shape.begin() + 3, shape.end());
  return p.reshape(merged).slice(1, 0, T);
}

torch::Tensor cumsum_rows(const torch::Tensor& x) {
  if (recording_grad() || !x.device().is_cpu() || x.dim() < 2) return torch::cumsum(x, -2);
  auto y = x.clone();
  for (int64_t r = 1; r < y.size(-2); ++r) y.select(-2, r).add_(y.select(-2, r - 1));
  return y;
}

bool decay_factorisable(const torch::Tensor& b_cum) {
  if (b_cum.numel() == 0) return true;
  const double limit = b_cum.scalar_type() == torch::kFloat64 ? 300.0 : 40.0;
  auto [lo, hi] = at::aminmax(b_cum.detach());
  const double span = std::max(-lo.item<double>(), hi.item<double>());
  return span <= limit;  // false for NaN
}

namespace {

// A stack of matrices [..., R, C] as BLAS reads it: each matrix row-major with leading dimension ld
// (unit column stride), or the transpose of one (unit row stride); batch dims at any strides.
struct GemmOperand {
  torch::Tensor t;
  bool transposed = false;
  int64_t ld = 0;
};

GemmOperand gemm_operand(const torch::Tensor& x) {
  const int64_t R = x.size(-2), C = x.size(-1), sr = x.stride(-2), sc = x.stride(-1);
  if (R > 1 && C > 1) {
    if (sc == 1 && sr >= C) return {x, false, sr};
    if (sr == 1 && sc >= R) return {x, true, sc};
  }
  auto c = x.contiguous();
  return {c, false, std::max<int64_t>(1, C)};
}

// Element offset of matrix `i` (row-major order over the batch dims of `shape`) in a tensor of `strides`.
int64_t batch_offset(int64_t i, at::IntArrayRef shape, at::IntArrayRef strides) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 3; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

template <typename T>
torch::Tensor blas_batched_matmul(const torch::Tensor& a, const torch::Tensor& b, FortranGemm<T> gemm) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  auto out_shape = a.sizes().vec();
  out_shape.back() = N;
  auto out = torch::empty(out_shape, a.options());
  const int64_t batch = out.numel() / std::max<int64_t>(1, M * N);
  auto A = gemm_operand(a), B = gemm_operand(b);
  // Row-major C = A B is column-major Cᵀ = Bᵀ Aᵀ: a row-major matrix is its own transpose in column-major.
  const char tb = B.transposed ? 'T' : 'N', ta = A.transposed ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int ldb = static_cast<int>(B.ld), lda = static_cast<int>(A.ld), ldc = m;
  const T one = 1, zero = 0;
  const T *pa = A.t.data_ptr<T>(), *pb = B.t.data_ptr<T>();
  T* pc = out.data_ptr<T>();
  for (int64_t i = 0; i < batch; ++i)
    gemm(&tb, &ta, &m, &n, &k, &one, pb + batch_offset(i, B.t.sizes(), B.t.strides()), &ldb,
         pa + batch_offset(i, A.t.sizes(), A.t.strides()), &lda, &zero, pc + i * M * N, &ldc);
  return out;
}

}  // namespace

torch::Tensor chunk_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  const bool eligible = !torch::GradMode::is_enabled() && a.device().is_cpu() && b.device().is_cpu() &&
                        a.scalar_type() == b.scalar_type() && a.dim() >= 3 && a.dim() == b.dim() &&
                        a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2) &&
                        a.size(-1) == b.size(-2) && a.numel() > 0 && b.numel() > 0 &&
                        std::max({a.size(-2), a.size(-1), b.size(-1), a.stride(-2), a.stride(-1), b.stride(-2),
                                  b.stride(-1)}) < INT_MAX;
  if (eligible && a.scalar_type() == torch::kFloat32 && fortran_gemm<float>())
    return blas_batched_matmul<float>(a, b, fortran_gemm<float>());
  if (eligible && a.scalar_type() == torch::kFloat64 && fortran_gemm<double>())
    return blas_batched_matmul<double>(a, b, fortran_gemm<double>());
  return torch::matmul(a, b);
}

std::vector<torch::Tensor> time_pieces(const torch::Tensor& x, const std::vector<int64_t>& sizes) {
  auto parts = split_pieces(x, sizes, 1);
  for (auto& t : parts)
    if (t.defined()) t = t.transpose(1, 2);
  return parts;
}

torch::Tensor causal_mask(int64_t n, const torch::Device& device, bool strict) {
  auto opts = torch::TensorOptions().dtype(torch::kBool).device(device);
  return torch::ones({n, n}, opts).tril(strict ? -1 : 0);
}

std::vector<int64_t> chunk_piece_sizes(int64_t T, int64_t chunk, int64_t offset) {
  std::vector<int64_t> sizes;
  for (int64_t pos = 0, off = offset; pos < T;) {
    const int64_t n = std::min(T - pos, chunk - off);
    sizes.push_back(n);
    pos += n;
    off = (off + n) % chunk;
  }
  return sizes;
}

std::vector<torch::Tensor> split_pieces(const torch::Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  if (!x.defined()) return std::vector<torch::Tensor>(sizes.size());
  if (sizes.empty()) return {};
  return x.split_with_sizes(sizes, dim);
}

namespace {

int64_t largest_divisor_at_most(int64_t n, int64_t cap) {
  for (int64_t d = std::max<int64_t>(1, std::min(n, cap)); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

}  // namespace

torch::Tensor per_channel_decayed_scores(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& B,
                                         int64_t sub_chunk) {
  const int64_t c = largest_divisor_at_most(Q.size(-2), sub_chunk);
  const int64_t C = Q.size(-2), Kd = Q.size(-1), S = C / c;
  auto lead = Q.sizes().vec();
  lead.resize(lead.size() - 2);
  auto with_lead = [&](std::initializer_list<int64_t> tail) {
    auto shape = lead;
    shape.insert(shape.end(), tail);
    return shape;
  };
  auto Qs = Q.reshape(with_lead({S, c, Kd})), Ks = K.reshape(with_lead({S, c, Kd}));
  auto Bs = B.reshape(with_lead({S, c, Kd}));
  auto A = torch::zeros(with_lead({C, C}), Q.options());

  // Diagonal blocks: A_ij = Σ_k Q_ik K_jk exp(B_ik − B_jk), i >= j inside the block. The clamped
  // differences are <= 0, so every term is finite and the upper triangle is zeroed after the sum
  // (same values as masking the exponent with −inf).
  auto diff = Bs.unsqueeze(-2) - Bs.unsqueeze(-3);                             // [.., S, c, c, K]
  diff = recording_grad() ? diff.clamp_max(0.0) : diff.clamp_max_(0.0);
  auto QK = Qs.unsqueeze(-2) * Ks.unsqueeze(-3);
  auto A_diag = tril_fresh((recording_grad() ? QK * diff.exp() : QK.mul_(diff.exp_())).sum(-1));
  const int64_t nd = A.dim();
  // View A as [.., S(I), c, S(J), c]; its I == J blocks are the diagonal over dims (-4, -2),
  // returned as [.., c, c, S].
  auto A_blocks = A.view(with_lead({S, c, S, c}));
  std::vector<int64_t> s_last;
  for (int64_t d = 0; d < nd - 2; ++d) s_last.push_back(d);
  s_last.insert(s_last.end(), {nd - 1, nd, nd - 2});  // A_diag [.., S, c, c] -> [.., c, c, S]
  A_blocks.diagonal(0, nd - 2, nd).copy_(A_diag.permute(s_last));

  // Off-diagonal blocks J < I against r_I = B at the first row of block I: for block row I, one
  // product q_n [.., c, K] @ k_nᵀ [.., K, I·c] over all earlier rows.
  for (int64_t I = 1; I < S; ++I) {
    auto r = Bs.select(-3, I).narrow(-2, 0, 1);                                 // [.., 1, K]
    auto q_n = Qs.select(-3, I) * (Bs.select(-3, I) - r).clamp_max(0.0).exp();  // [.., c, K]
    auto B_prev = B.narrow(-2, 0, I * c), K_prev = K.narrow(-2, 0, I * c);       // [.., I·c, K]
    auto k_n = K_prev * (r - B_prev).clamp_max(0.0).exp();
    A.narrow(-2, I * c, c).narrow(-1, 0, I * c).copy_(chunk_matmul(q_n, k_n.transpose(-1, -2)));
  }
  return A;
}


}  // namespace mnemo
