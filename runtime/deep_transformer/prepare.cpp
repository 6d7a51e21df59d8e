// DT / SWDT / DOT kernel internals (see prepare.h): the input check and layout helpers shared by
// blocked_attention.cpp, naive.cpp and chunk.cpp.
#include "runtime/deep_transformer/prepare.h"

#include "core/common.h"
#include "runtime/kernels/precision.h"

namespace mnemo {
namespace deep_transformer_detail {

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

DotPrep dot_prep(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& la,
                 const torch::Tensor& eta, const torch::Tensor& gamma, const torch::Tensor& s) {
  const auto dt = recurrence_dtype(v);
  auto ga = gamma.defined() ? bh(gamma, dt) : torch::ones_like(bh(eta, dt));
  return {bh(q, dt), bh(k, dt), bh(v, dt), bh(la, dt), bh(eta, dt), ga, s.to(dt).view({1, -1, 1, 1}), dt};
}

}  // namespace deep_transformer_detail
}  // namespace mnemo
