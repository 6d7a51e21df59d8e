// Token-by-token Hope kernels (runtime/hope/hope.h): the self-modifying Titans' DGD update and the Continuum Memory
// System level, one token at a time, as written in arXiv 2512.24695 Eqs. 31 and 93; and what both forms share (input
// checks, the chunk-start reads).
#include <cmath>
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/hope/hope.h"
#include "runtime/kernels/precision.h"
#include "runtime/layers.h"

namespace mnemo {

namespace {
std::string shape_text(const torch::Tensor& t) { return c10::str(t.sizes()); }

void require_shape(const char* kernel, const char* name, const torch::Tensor& t, std::vector<int64_t> shape) {
  bool ok = t.dim() == static_cast<int64_t>(shape.size());
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = t.size(static_cast<int64_t>(i)) == shape[i];
  if (!ok) throw Error(std::string(kernel) + ": " + name + " must be " + c10::str(c10::IntArrayRef(shape)) + ", got " +
                       shape_text(t));
}

void require_offset(const char* kernel, int64_t chunk_size, int64_t offset) {
  if (chunk_size < 0) throw Error(std::string(kernel) + ": chunk_size must be >= 0, got " + std::to_string(chunk_size));
  if (offset < 0) throw Error(std::string(kernel) + ": offset must be >= 0, got " + std::to_string(offset));
}
}  // namespace

void check_smt_token_inputs(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                            const SmtGates& gates, int64_t chunk_size, int64_t offset) {
  const char* k = "self_modifying_titans";
  if (!x_key.defined() || !x_value.defined() || !q.defined() || !gates.w_eta.defined() || !gates.b_eta.defined() ||
      !gates.w_alpha.defined() || !gates.b_alpha.defined())
    throw Error("self_modifying_titans: x_key, x_value, q and the four gate tensors are required");
  if (x_key.dim() != 4) throw Error("self_modifying_titans: x_key must be [B, T, H, d], got " + shape_text(x_key));
  const int64_t B = x_key.size(0), T = x_key.size(1), H = x_key.size(2), d = x_key.size(3);
  require_shape(k, "x_value", x_value, {B, T, H, d});
  require_shape(k, "q", q, {B, T, H, d});
  require_shape(k, "w_eta", gates.w_eta, {H, d});
  require_shape(k, "w_alpha", gates.w_alpha, {H, d});
  require_shape(k, "b_eta", gates.b_eta, {H});
  require_shape(k, "b_alpha", gates.b_alpha, {H});
  if (chunk_size < 1) throw Error("self_modifying_titans: chunk_size must be >= 1, got " + std::to_string(chunk_size));
  if (!(gates.eta_max > 0) || !std::isfinite(gates.eta_max))
    throw Error("self_modifying_titans: eta_max must be finite and > 0, got " + std::to_string(gates.eta_max));
  require_offset(k, chunk_size, offset);
}

void check_smt_inputs(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                      const torch::Tensor& init,
                      const SmtGates& gates, const torch::Tensor& chunk_start, const torch::Tensor& running,
                      int64_t chunk_size, int64_t offset) {
  const char* k = "self_modifying_titans";
  check_smt_token_inputs(x_key, x_value, q, gates, chunk_size, offset);
  if (!init.defined()) throw Error("self_modifying_titans: init is required");
  const int64_t B = x_key.size(0), H = x_key.size(2), d = x_key.size(3);
  require_shape(k, "init", init, {kSmtMemories, H, d, d});
  if (chunk_start.defined() != running.defined())
    throw Error("self_modifying_titans: chunk_start and running must both be given or both be absent");
  if (chunk_start.defined()) {
    require_shape(k, "chunk_start", chunk_start, {B, kSmtMemories, H, d, d});
    require_shape(k, "running", running, {B, kSmtMemories, H, d, d});
  }
}

void check_cms_level_inputs(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& eta,
                            const torch::Tensor& w1_0, const torch::Tensor& w2_0, const CmsLevelState& state,
                            int64_t chunk_size, int64_t offset) {
  const char* k = "cms";
  if (!x.defined() || !v.defined() || !eta.defined() || !w1_0.defined() || !w2_0.defined())
    throw Error("cms: x, v, eta, w1 and w2 are required");
  if (x.dim() != 3) throw Error("cms: x must be [B, T, d], got " + shape_text(x));
  const int64_t B = x.size(0), T = x.size(1), d = x.size(2);
  if (w1_0.dim() != 2) throw Error("cms: w1 must be [h, d], got " + shape_text(w1_0));
  const int64_t h = w1_0.size(0);
  require_shape(k, "v", v, {B, T, d});
  require_shape(k, "eta", eta, {B, T});
  require_shape(k, "w1", w1_0, {h, d});
  require_shape(k, "w2", w2_0, {d, h});
  if (state.w1.defined()) {
    require_shape(k, "state w1", state.w1, {B, h, d});
    require_shape(k, "state w2", state.w2, {B, d, h});
    require_shape(k, "state p1", state.p1, {B, h, d});
    require_shape(k, "state p2", state.p2, {B, d, h});
  }
  require_offset(k, chunk_size, offset);
}

namespace hope_detail {

std::pair<torch::Tensor, torch::Tensor> smt_start_states(const torch::Tensor& init, const torch::Tensor& chunk_start,
                                                         const torch::Tensor& running, int64_t batch,
                                                         torch::ScalarType dt) {
  if (chunk_start.defined()) return {chunk_start.to(dt), running.to(dt)};
  auto s = init.to(dt).unsqueeze(0).expand({batch, init.size(0), init.size(1), init.size(2), init.size(3)});
  return {s, s};
}

torch::Tensor smt_read_inputs(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q) {
  const auto a = x_key.transpose(1, 2), b = x_value.transpose(1, 2);  // [B, H, n, d]
  // Each memory's input in the memories' order (k: a, v: b, η: a, α: a, mem: q).
  return torch::stack({a, b, a, a, q.transpose(1, 2)}, 1);
}

SmtGateWeights smt_gate_weights(const SmtGates& gates, torch::ScalarType dt) {
  return {torch::stack({gates.w_eta, gates.w_alpha}).to(dt).unsqueeze(0).unsqueeze(-2),
          torch::stack({gates.b_eta, gates.b_alpha}).to(dt).unsqueeze(0).unsqueeze(-1), gates.eta_max};
}

void smt_gate_values(SmtReads& r, const torch::Tensor& z, double eta_max) {
  r.eta = eta_max * torch::sigmoid(z.select(1, 0));
  r.log_alpha = torch::clamp_min(torch::log_sigmoid(z.select(1, 1)), kSmtLogAlphaFloor);
  r.alpha = r.log_alpha.exp();
}

SmtReads smt_reads(const torch::Tensor& in, const torch::Tensor& S, const SmtGateWeights& gates) {
  static_assert(kSmtValue == kSmtKey + 1 && kSmtAlpha == kSmtEta + 1, "k, v and η, α read side by side");
  // The five reads M_□(in) = in + in S_□ as one batched product [B, 5, H, n, d].
  const auto reads = in + torch::matmul(in, S);
  SmtReads r;
  const auto kv = l2norm(reads.narrow(1, kSmtKey, 2));  // [B, 2, H, n, d]
  r.k = kv.select(1, 0);
  r.v = kv.select(1, 1);
  smt_gate_values(r, (reads.narrow(1, kSmtEta, 2) * gates.w).sum(-1) + gates.b, gates.eta_max);
  r.o = reads.select(1, kSmtMemory).transpose(1, 2);
  return r;
}

CmsLevelState cms_start_state(const torch::Tensor& w1_0, const torch::Tensor& w2_0, const CmsLevelState& state,
                              int64_t batch, torch::ScalarType dt) {
  if (state.w1.defined()) return {state.w1.to(dt), state.w2.to(dt), state.p1.to(dt), state.p2.to(dt)};
  const int64_t h = w1_0.size(0), d = w1_0.size(1);
  const auto opts = w1_0.options().dtype(dt);
  return {w1_0.to(dt).unsqueeze(0).expand({batch, h, d}), w2_0.to(dt).unsqueeze(0).expand({batch, d, h}),
          torch::zeros({batch, h, d}, opts), torch::zeros({batch, d, h}, opts)};
}

void cms_apply_chunk_step(CmsLevelState& s) {
  s.w1 = s.w1 - s.p1;
  s.w2 = s.w2 - s.p2;
  s.p1 = torch::zeros_like(s.p1);
  s.p2 = torch::zeros_like(s.p2);
}

torch::Tensor silu_grad(const torch::Tensor& z) {
  const auto s = torch::sigmoid(z);
  return s * (1 + z * (1 - s));
}

}  // namespace hope_detail

SmtResult smt_recurrent(const torch::Tensor& x_key, const torch::Tensor& x_value, const torch::Tensor& q,
                        const torch::Tensor& init, const SmtGates& gates, const torch::Tensor& chunk_start,
                        const torch::Tensor& running, int64_t chunk_size, int64_t offset) {
  check_smt_inputs(x_key, x_value, q, init, gates, chunk_start, running, chunk_size, offset);
  const auto dt = recurrence_dtype({x_key, x_value, q, init, chunk_start});
  auto [S_chunk, S] = hope_detail::smt_start_states(init, chunk_start, running, q.size(0), dt);
  const auto ad = x_key.to(dt), bd = x_value.to(dt), qd = q.to(dt);
  const auto gate_weights = hope_detail::smt_gate_weights(gates, dt);
  std::vector<torch::Tensor> outs;
  for (int64_t t = 0; t < q.size(1); ++t) {
    const auto r =
        hope_detail::smt_reads(hope_detail::smt_read_inputs(ad.narrow(1, t, 1), bd.narrow(1, t, 1), qd.narrow(1, t, 1)),
                               S_chunk, gate_weights);
    outs.push_back(r.o);
    // One token: row vectors k, v [B, 1, H, 1, d] against the five memories [B, 5, H, d, d].
    const auto k = r.k.unsqueeze(1);
    const auto v = r.v.unsqueeze(1);
    const auto eta = r.eta.unsqueeze(1).unsqueeze(-1);  // [B, 1, H, 1, 1]
    const auto alpha = r.alpha.unsqueeze(1).unsqueeze(-1);
    const auto v_hat = v + torch::matmul(v, S_chunk);  // v̂_□ = M_□^c(v) = v + v S_□^c
    const auto k_chunk = k + torch::matmul(k, S_chunk);  // M_□^c(k)
    const auto k_now = torch::matmul(k, S);              // k S_□,t−1
    // S_t = α S_{t−1} − η kᵀ (k S_{t−1}) − η kᵀ (M_□^c(k) − v̂_□)
    S = alpha * S + eta * torch::matmul(k.transpose(-1, -2), v_hat - k_chunk - k_now);
    if ((offset + t + 1) % chunk_size == 0) S_chunk = S;
  }
  auto o = outs.empty() ? torch::zeros_like(qd) : torch::cat(outs, 1);
  return {o.to(q.scalar_type()), S_chunk, S};
}

CmsLevelResult cms_level_recurrent(const torch::Tensor& x, const torch::Tensor& v, const torch::Tensor& eta,
                                   const torch::Tensor& w1_0, const torch::Tensor& w2_0, const CmsLevelState& state,
                                   int64_t chunk_size, int64_t offset) {
  check_cms_level_inputs(x, v, eta, w1_0, w2_0, state, chunk_size, offset);
  const auto dt = recurrence_dtype({x, v, w1_0, state.w1});
  const auto xd = x.to(dt), vd = v.to(dt), ed = eta.to(dt);
  if (chunk_size == 0) {  // a level that never changes in context
    auto y = xd + torch::matmul(torch::silu(torch::matmul(xd, w2_0.to(dt))), w1_0.to(dt));
    return {y.to(x.scalar_type()), {}};
  }
  auto s = hope_detail::cms_start_state(w1_0, w2_0, state, x.size(0), dt);
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < x.size(1); ++t) {
    const auto xt = xd.narrow(1, t, 1);  // [B, 1, d]
    const auto z = torch::bmm(xt, s.w2);  // [B, 1, h]
    const auto a = torch::silu(z);
    const auto y = xt + torch::bmm(a, s.w1);
    ys.push_back(y);
    // ½‖M(x) − v‖²: ∇W1 = aᵀ e, ∇W2 = xᵀ ((e W1ᵀ) ⊙ SiLU'(z)), with e = M(x) − v; each scaled by η_t / C over
    // 1 + the squared norm of its layer's input (normalised steps, hope.h).
    const auto e = y - vd.narrow(1, t, 1);
    const auto step = (ed.narrow(1, t, 1) / static_cast<double>(chunk_size)).unsqueeze(-1);  // [B, 1, 1]
    s.p1 = s.p1 + step / (1 + a.pow(2).sum(-1, true)) * torch::bmm(a.transpose(1, 2), e);
    s.p2 = s.p2 + step / (1 + xt.pow(2).sum(-1, true)) *
                      torch::bmm(xt.transpose(1, 2), torch::bmm(e, s.w1.transpose(1, 2)) * hope_detail::silu_grad(z));
    if ((offset + t + 1) % chunk_size == 0) hope_detail::cms_apply_chunk_step(s);
  }
  auto y = ys.empty() ? torch::zeros_like(xd) : torch::cat(ys, 1);
  return {y.to(x.scalar_type()), s};
}

}  // namespace mnemo
