// Atlas GD family kernel internals (docs/models.md#dla-swla-and-omeganet): the input checks and preparation, the
// sliding-window buffers and inner-gradient terms, and the result assembly shared by the Omega forms (naive.cpp,
// chunk.cpp) and the Muon kernels (atlas.cpp, muon_chunk.cpp); declared in omega.h (atlas_detail).
#include "runtime/atlas/omega.h"
#include "runtime/kernels/chunking.h"
#include "runtime/kernels/precision.h"
#include "core/common.h"

namespace mnemo {

namespace atlas_detail {

namespace {

MemoryWeights cast_all(const MemoryWeights& w, torch::ScalarType dt) {
  MemoryWeights o;
  for (const auto& t : w) o.push_back(t.to(dt));
  return o;
}

void check(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in, const OmegaState& init) {
  if (opt.chunk < 1) throw Error("atlas: chunk_size must be >= 1, got " + std::to_string(opt.chunk));
  if (opt.window < 1) throw Error("atlas: window must be >= 1, got " + std::to_string(opt.window));
  if (opt.loss != "l2" && opt.loss != "dot")
    throw Error("atlas: loss must be \"l2\" or \"dot\", got \"" + opt.loss + "\"");
  if (opt.muon && opt.ns_steps < 0) throw Error("atlas: ns_steps must be >= 0, got " + std::to_string(opt.ns_steps));
  if (opt.muon) check_muon_options(opt, "atlas");
  if (!in.q.defined() || in.q.dim() != 4 || !in.k.defined() || in.k.sizes() != in.q.sizes())
    throw Error("atlas: q and k must be [B, T, H, d] of one shape");
  if (in.q.size(3) != spec.d_in) throw Error("atlas: q's last dim must be d_in " + std::to_string(spec.d_in));
  const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2);
  for (const auto* f : {&in.qf, &in.kf})
    if (f->defined() && (f->dim() != 4 || f->size(0) != B || f->size(1) != T || f->size(2) != H ||
                         f->size(3) != spec.feat()))
      throw Error("atlas: qf and kf must be [B, T, H, d_feat = " + std::to_string(spec.feat()) + "], got " +
                  c10::str(f->sizes()));
  if (!in.qf.defined() && spec.feat() != spec.d_in) throw Error("atlas: qf/kf are required when d_feat != d_in");
  if (!in.v.defined() || in.v.dim() != 4 || in.v.size(0) != B || in.v.size(1) != T || in.v.size(2) != H ||
      in.v.size(3) != spec.d_out)
    throw Error("atlas: v must be [B, T, H, d_out]");
  const std::vector<int64_t> bth = {B, T, H};
  auto gate = [&](const torch::Tensor& t, const char* name, bool required) {
    if (!t.defined()) {
      if (required) throw Error(std::string("atlas: ") + name + " is required");
      return;
    }
    if (t.sizes() != torch::IntArrayRef(bth))
      throw Error(std::string("atlas: ") + name + " must be [B, T, H] = " + c10::str(torch::IntArrayRef(bth)) +
                  ", got " + c10::str(t.sizes()));
  };
  gate(in.eta, "eta", true);
  gate(in.log_alpha, "log_alpha", false);
  gate(in.gamma, "gamma", false);
  gate(in.log_theta, "log_theta", opt.muon);
  if (init.w.size() != spec.num_weights())
    throw Error("atlas: the initial state needs " + std::to_string(spec.num_weights()) + " weight tensors, got " +
                std::to_string(init.w.size()));
  if (init.offset < 0 || init.offset >= opt.chunk)
    throw Error("atlas: state offset " + std::to_string(init.offset) + " outside [0, chunk_size)");
}

}  // namespace

torch::Tensor bh(const torch::Tensor& x, int64_t a, int64_t n) { return x.narrow(1, a, n).transpose(1, 2); }

Prepared prepare(const DeepMemorySpec& spec, const OmegaOptions& opt, const OmegaInputs& in, const OmegaState& init) {
  check(spec, opt, in, init);
  Prepared p;
  p.dt = recurrence_dtype(in.q);
  auto c = [&](const torch::Tensor& t) { return t.defined() ? t.to(p.dt) : t; };
  p.in.q = c(in.q);
  p.in.k = c(in.k);
  p.in.qf = in.qf.defined() ? c(in.qf) : p.in.q;
  p.in.kf = in.kf.defined() ? c(in.kf) : p.in.k;
  p.in.v = c(in.v);
  p.in.log_alpha = c(in.log_alpha);
  p.in.eta = c(in.eta);
  p.in.gamma = in.gamma.defined() ? c(in.gamma) : torch::ones_like(p.in.eta);
  p.in.log_theta = c(in.log_theta);
  p.w = cast_all(init.w, p.dt);
  if (opt.muon) {
    p.s = cast_all(init.s, p.dt);
    if (p.s.empty())
      for (const auto& t : p.w) p.s.push_back(torch::zeros_like(t));
  }
  p.anchor = (init.offset == 0 || init.anchor.empty()) ? p.w : cast_all(init.anchor, p.dt);
  const int64_t B = in.q.size(0), H = in.q.size(2), m = opt.window - 1;
  const auto o = p.in.q.options();
  if (init.buf_k.defined() && init.buf_k.size(2) == m) {
    p.bk = c(init.buf_k);
    p.bkf = c(init.buf_kf);
    p.bv = c(init.buf_v);
    p.bg = c(init.buf_g);
  } else {  // before the sequence start: zero tokens with γ = 0 (no contribution)
    p.bk = torch::zeros({B, H, m, spec.d_in}, o);
    p.bkf = torch::zeros({B, H, m, spec.feat()}, o);
    p.bv = torch::zeros({B, H, m, spec.d_out}, o);
    p.bg = torch::zeros({B, H, m}, o);
  }
  if (opt.muon && opt.ns_granularity == "chunk") {  // A_{s..t}, c_t of the chunk so far (1, 0 at its start)
    const bool mid = init.offset > 0 && init.ns_decay.defined();
    p.ns_decay = mid ? c(init.ns_decay) : torch::ones({B, H}, o);
    p.ns_step = mid ? c(init.ns_step) : torch::zeros({B, H}, o);
  }
  return p;
}

RankOneTerms window_terms(const DeepMemorySpec& spec, const OmegaOptions& opt, const MemoryWeights& anchor,
                          const torch::Tensor& k, const torch::Tensor& kf, const torch::Tensor& v) {
  auto acts = memory_forward(spec, anchor, k, {}, kf);
  auto g_y = opt.loss == "l2" ? acts.out - v : -v;  // ℓ2: e = M^0(k) - v; dot (Hebbian, docs/models.md#dla-swla-and-omeganet): -v
  return memory_grad_terms(spec, anchor, acts, g_y);
}

std::vector<OmegaInputs> split_inputs(const OmegaInputs& in, const std::vector<int64_t>& sizes) {
  std::vector<OmegaInputs> out(sizes.size());
  for (auto field : {&OmegaInputs::q, &OmegaInputs::qf, &OmegaInputs::k, &OmegaInputs::kf, &OmegaInputs::v,
                     &OmegaInputs::log_alpha, &OmegaInputs::eta, &OmegaInputs::gamma, &OmegaInputs::log_theta}) {
    auto parts = time_pieces(in.*field, sizes);
    for (size_t i = 0; i < sizes.size(); ++i) out[i].*field = parts[i];
  }
  return out;
}

torch::Tensor band_mask(int64_t n, int64_t c, const torch::TensorOptions& o) {
  auto t = torch::arange(n, o.dtype(torch::kInt64)).unsqueeze(1);
  auto j = torch::arange(n + c - 1, o.dtype(torch::kInt64)).unsqueeze(0);  // window index j ↔ chunk token j-(c-1)
  return ((j >= t) & (j <= t + (c - 1))).to(o.dtype());
}

void roll_buffers(Prepared& p, int64_t c, const torch::Tensor& k, const torch::Tensor& kf, const torch::Tensor& v,
                  const torch::Tensor& g) {
  const int64_t N = k.size(2), m = c - 1;
  p.bk = k.narrow(2, N - m, m);
  p.bkf = kf.narrow(2, N - m, m);
  p.bv = v.narrow(2, N - m, m);
  p.bg = g.narrow(2, N - m, m);
}

OmegaResult finish(const Prepared& p, std::vector<torch::Tensor>& ys, const OmegaInputs& raw, int64_t offset) {
  auto y = ys.empty() ? torch::zeros({raw.q.size(0), 0, raw.q.size(2), raw.v.size(3)}, raw.q.options().dtype(p.dt))
                      : torch::cat(ys, 2).transpose(1, 2);
  OmegaResult r;
  r.y = y.to(raw.v.scalar_type());
  r.state.w = p.w;
  r.state.s = p.s;
  r.state.anchor = p.anchor;
  r.state.offset = offset;
  r.state.buf_k = p.bk;
  r.state.buf_kf = p.bkf;
  r.state.buf_v = p.bv;
  r.state.buf_g = p.bg;
  r.state.ns_decay = p.ns_decay;
  r.state.ns_step = p.ns_step;
  return r;
}

}  // namespace atlas_detail

}  // namespace mnemo
