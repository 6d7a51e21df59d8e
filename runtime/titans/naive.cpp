// Titans LMM kernel (docs/models.md#titans): the token-by-token form with materialised weights, the reference of
// the chunk-wise dual form (chunk.cpp) and the decode step. The shared input preparation is prepare.h.
#include "core/common.h"
#include "runtime/kernels/precision.h"
#include "runtime/titans/prepare.h"

namespace mnemo {

// Token t's step on the prepared state: the gradient of ½‖M(k_t) − v_t‖² at the anchor (clipped), then momentum and
// retention update p.w (and p.s); returns y_t = M_t(q_t) [B, H, 1, d_out].
static torch::Tensor titans_token_step(const DeepMemorySpec& spec, titans_detail::Prepared& p, int64_t t,
                                double inner_grad_clip) {
  using titans_detail::bh;
  auto kt = bh(p.k, t, 1), vt = bh(p.v, t, 1), qt = bh(p.q, t, 1);  // [B, H, 1, d]
  auto acts = memory_forward(spec, p.anchor, kt);
  auto terms = clip_grad_terms(memory_grad_terms(spec, p.anchor, acts, acts.out - vt), inner_grad_clip);
  auto at = [&](const torch::Tensor& x) { return x.select(1, t); };  // [B, H]
  auto keep = p.lk.defined() ? at(p.lk).exp() : torch::Tensor();
  auto eta = p.le.defined() ? at(p.le).exp() : torch::Tensor();
  MemoryWeights s = p.s;
  momentum_step(p.w, s, keep, eta, at(p.th), terms);
  if (eta.defined()) p.s = s;
  return memory_apply(spec, p.w, qt);
}

TitansLmmResult titans_lmm_recurrent(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& log_keep,
                                     const torch::Tensor& log_eta, const torch::Tensor& theta,
                                     const TitansMemoryState& init, int64_t chunk_size, double inner_grad_clip) {
  using titans_detail::check_inputs, titans_detail::prepare;
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1: the recurrence in fp32 under bf16 autocast
  check_inputs(spec, q, k, v, log_keep, log_eta, theta, init, chunk_size, inner_grad_clip);
  auto p = prepare(q, k, v, log_keep, log_eta, theta, init);
  const int64_t T = q.size(1);
  int64_t off = init.offset;
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    ys.push_back(titans_token_step(spec, p, t, inner_grad_clip));
    if (++off == chunk_size) {
      off = 0;
      p.anchor = p.w;
    }
  }
  auto y = T > 0 ? torch::cat(ys, 2).transpose(1, 2)
                 : torch::zeros({q.size(0), 0, q.size(2), spec.d_out}, q.options().dtype(p.dt));
  return {y.to(v.scalar_type()), {p.w, p.s, p.anchor, off}};
}

TitansLmmResult titans_lmm_static_step(const DeepMemorySpec& spec, const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, const torch::Tensor& log_keep,
                                       const torch::Tensor& log_eta, const torch::Tensor& theta,
                                       const TitansMemoryState& init, const torch::Tensor& offset,
                                       torch::Tensor& next_offset, int64_t chunk_size, double inner_grad_clip) {
  using titans_detail::check_inputs, titans_detail::prepare;
  const AutocastOff autocast_off;  // docs/models.md#numerical-stability rule 1
  TitansMemoryState start = init;
  start.offset = 0;  // the position in the chunk is `offset`, on the device
  check_inputs(spec, q, k, v, log_keep, log_eta, theta, start, chunk_size, inner_grad_clip);
  if (q.size(1) != 1) throw Error("titans_lmm: the static decode step takes one token, got T " + std::to_string(q.size(1)));
  if (init.anchor.size() != init.w.size()) throw Error("titans_lmm: the static decode step needs the gradient anchor");
  if (!offset.defined() || offset.numel() != 1 || offset.scalar_type() != torch::kLong)
    throw Error("titans_lmm: the static decode step needs the offset in the chunk as one int64 value");
  auto p = prepare(q, k, v, log_keep, log_eta, theta, start);
  // The anchor as prepare() takes it, with the offset on the device: the memory itself at a chunk's first token.
  const auto at_chunk_start = offset.reshape({}) == 0;
  p.anchor = titans_detail::cast_all(init.anchor, p.dt);
  for (size_t l = 0; l < p.anchor.size(); ++l) p.anchor[l] = torch::where(at_chunk_start, p.w[l], p.anchor[l]);
  auto y = titans_token_step(spec, p, 0, inner_grad_clip).transpose(1, 2);  // [B, 1, H, d_out]
  next_offset = torch::remainder(offset.reshape({}) + 1, chunk_size);
  const auto completes_chunk = next_offset == 0;  // the next token's gradients are taken at this memory
  for (size_t l = 0; l < p.anchor.size(); ++l) p.anchor[l] = torch::where(completes_chunk, p.w[l], p.anchor[l]);
  return {y.to(v.scalar_type()), {p.w, p.s, p.anchor, 0}};
}

}  // namespace mnemo
