// Titans LMM kernel internals (docs/models.md#titans): input checks and preparation shared by the token-by-token
// form (naive.cpp) and the chunk-wise dual form (chunk.cpp); see prepare.h.
#include "runtime/titans/prepare.h"

#include "core/common.h"
#include "runtime/kernels/precision.h"

namespace mnemo {
namespace titans_detail {

void check_inputs(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& log_keep, const torch::Tensor& log_eta, const torch::Tensor& theta,
                  const TitansMemoryState& init, int64_t chunk_size, double inner_grad_clip) {
  if (chunk_size < 1) throw Error("titans: chunk_size must be >= 1, got " + std::to_string(chunk_size));
  if (!(inner_grad_clip >= 0))
    throw Error("titans: inner_grad_clip must be >= 0 (0 = off), got " + std::to_string(inner_grad_clip));
  if (q.dim() != 4 || k.sizes() != q.sizes())
    throw Error("titans: q and k must be [B, T, H, d_in] of one shape, got " + c10::str(q.sizes()) + " and " +
                c10::str(k.sizes()));
  if (q.size(3) != spec.d_in) throw Error("titans: q's last dim must be d_in " + std::to_string(spec.d_in));
  if (v.dim() != 4 || v.size(0) != q.size(0) || v.size(1) != q.size(1) || v.size(2) != q.size(2) ||
      v.size(3) != spec.d_out)
    throw Error("titans: v must be [B, T, H, d_out], got " + c10::str(v.sizes()));
  const std::vector<int64_t> bth = {q.size(0), q.size(1), q.size(2)};
  for (auto p : {std::make_pair("theta", theta), std::make_pair("log_keep", log_keep),
                 std::make_pair("log_eta", log_eta)})
    if ((p.second.defined() || std::string(p.first) == "theta") &&
        (!p.second.defined() || p.second.sizes() != torch::IntArrayRef(bth)))
      throw Error(std::string("titans: ") + p.first + " must be [B, T, H] = " + c10::str(torch::IntArrayRef(bth)));
  if (init.w.size() != spec.num_weights())
    throw Error("titans: the initial state needs " + std::to_string(spec.num_weights()) + " weight tensors, got " +
                std::to_string(init.w.size()));
  if (init.offset < 0 || init.offset >= chunk_size)
    throw Error("titans: state offset " + std::to_string(init.offset) + " outside [0, chunk_size)");
}

MemoryWeights cast_all(const MemoryWeights& w, torch::ScalarType dt) {
  MemoryWeights o;
  for (const auto& t : w) o.push_back(t.to(dt));
  return o;
}

// [B, T, H, ...] -> [B, H, T, ...] slice of tokens [a, a+n)
torch::Tensor bh(const torch::Tensor& x, int64_t a, int64_t n) { return x.narrow(1, a, n).transpose(1, 2); }

Prepared prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                 const torch::Tensor& log_keep, const torch::Tensor& log_eta, const torch::Tensor& theta,
                 const TitansMemoryState& init) {
  Prepared p;
  p.dt = recurrence_dtype(q);
  p.q = q.to(p.dt);
  p.k = k.to(p.dt);
  p.v = v.to(p.dt);
  p.th = theta.to(p.dt);
  if (log_keep.defined()) p.lk = log_keep.to(p.dt);
  if (log_eta.defined()) p.le = log_eta.to(p.dt);
  p.w = cast_all(init.w, p.dt);
  if (log_eta.defined()) {
    p.s = cast_all(init.s, p.dt);
    if (p.s.empty())
      for (const auto& t : p.w) p.s.push_back(torch::zeros_like(t));
  }
  p.anchor = (init.offset == 0 || init.anchor.empty()) ? p.w : cast_all(init.anchor, p.dt);
  return p;
}

}  // namespace titans_detail
}  // namespace mnemo
