// Miras kernel internals (see prepare.h): input checks and preparation, per-matrix scales, the inner-gradient
// terms and the result assembly shared by naive.cpp and chunk.cpp, and the attentional bias gradient and the ℓq
// normaliser of miras.h.
#include "core/common.h"
#include "runtime/miras/prepare.h"

namespace mnemo {

namespace miras_detail {

namespace {

std::string shape_of(const torch::Tensor& t) { return c10::str(t.sizes()); }

void check_options(const MirasOptions& o) {
  if (o.bias != "l2" && o.bias != "huber" && o.bias != "lp")
    throw Error("miras: bias must be \"l2\", \"huber\" or \"lp\", got \"" + o.bias + "\"");
  if (o.retention != "l2" && o.retention != "lq" && o.retention != "kl")
    throw Error("miras: retention must be \"l2\", \"lq\" or \"kl\", got \"" + o.retention + "\"");
  if (o.chunk < 1) throw Error("miras: chunk must be >= 1, got " + std::to_string(o.chunk));
  if (o.sub_chunk < 1) throw Error("miras: sub_chunk must be >= 1, got " + std::to_string(o.sub_chunk));
  if (o.bias == "lp" && !(o.p >= 1)) throw Error("miras: p must be >= 1, got " + std::to_string(o.p));
  if (o.retention == "lq" && !(o.q >= 1)) throw Error("miras: q must be >= 1, got " + std::to_string(o.q));
}

}  // namespace

std::vector<Seq> split_seq(const Seq& x, const std::vector<int64_t>& sizes) {
  auto sp = [&](const torch::Tensor& t) {
    return t.defined() ? t.split_with_sizes(sizes, 2) : std::vector<torch::Tensor>(sizes.size());
  };
  auto q = sp(x.q), k = sp(x.k), v = sp(x.v), la = sp(x.la), eta = sp(x.eta), delta = sp(x.delta);
  std::vector<Seq> out;
  for (size_t i = 0; i < sizes.size(); ++i) out.push_back({q[i], k[i], v[i], la[i], eta[i], delta[i]});
  return out;
}

Prepared prepare(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& la,
                 const torch::Tensor& eta, const torch::Tensor& delta, const torch::Tensor& gamma,
                 const torch::Tensor& beta, const MirasState& st, const MirasOptions& opt) {
  check_options(opt);
  if (q.dim() != 4 || k.sizes() != q.sizes() || v.sizes() != q.sizes())
    throw Error("miras: q, k, v must be [B, T, H, d] of one shape, got " + shape_of(q) + ", " + shape_of(k) + ", " +
                shape_of(v));
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), d = q.size(3);
  if (la.dim() != 4 || la.size(0) != B || la.size(1) != T || la.size(2) != H ||
      (la.size(3) != d && la.size(3) != 1) || eta.sizes() != la.sizes())
    throw Error("miras: log_alpha and eta must be [B, T, H, d] or [B, T, H, 1] (one shape), got " + shape_of(la) +
                " and " + shape_of(eta));
  if (opt.bias == "huber" && (!delta.defined() || delta.sizes() != torch::IntArrayRef({B, T, H})))
    throw Error("miras: the huber bias needs delta [B, T, H], got " + (delta.defined() ? shape_of(delta) : "none"));
  Prepared p;
  p.spec.kind = MemoryKind::ResidualMLP_LN;
  p.spec.d_in = p.spec.d_out = d;
  p.spec.expansion = opt.expansion;
  p.spec.ln_eps = opt.ln_eps;
  p.spec.validate("miras");
  if (st.cur.size() != 2) throw Error("miras: the state needs 2 memory weights, got " + std::to_string(st.cur.size()));
  const auto shapes = p.spec.weight_shapes();
  for (size_t l = 0; l < 2; ++l)
    if (st.cur[l].sizes() != torch::IntArrayRef({B, H, shapes[l][0], shapes[l][1]}))
      throw Error("miras: memory weight " + std::to_string(l) + " must be [B, H, " + std::to_string(shapes[l][0]) +
                  ", " + std::to_string(shapes[l][1]) + "], got " + shape_of(st.cur[l]));
  if (st.pos < 0 || st.pos >= opt.chunk)
    throw Error("miras: state position " + std::to_string(st.pos) + " outside the chunk [0, " +
                std::to_string(opt.chunk) + ")");
  if (st.pos > 0 && st.anchor.size() != 2) throw Error("miras: a state inside a chunk needs its anchor");
  auto dt = torch::kFloat32;
  for (const auto& t : {q, k, v, la, eta, st.cur[0]})
    if (t.scalar_type() == torch::kFloat64) dt = torch::kFloat64;
  p.x.q = q.to(dt).transpose(1, 2);
  p.x.k = k.to(dt).transpose(1, 2);
  p.x.v = v.to(dt).transpose(1, 2);
  p.x.la = la.to(dt).transpose(1, 2);
  p.x.eta = eta.to(dt).transpose(1, 2);
  if (delta.defined()) p.x.delta = delta.to(dt).transpose(1, 2);
  p.norm.gamma = gamma.to(dt).view({1, H, 1, d});
  p.norm.beta = beta.to(dt).view({1, H, 1, d});
  for (const auto& w : st.cur) p.st.cur.push_back(w.to(dt));
  for (const auto& w : st.anchor) p.st.anchor.push_back(w.to(dt));
  p.st.pos = st.pos;
  p.G = la.size(3);
  p.d = d;
  return p;
}

// Per-matrix read/gradient scale: 1 / ||A^0||_q^{q-2} ("lq"), else undefined (1).
std::vector<torch::Tensor> scales(const MemoryWeights& anchor, const MirasOptions& o) {
  if (o.retention != "lq") return {torch::Tensor(), torch::Tensor()};
  return {1.0 / miras_lq_normaliser(anchor[0], o.q), 1.0 / miras_lq_normaliser(anchor[1], o.q)};
}

MemoryWeights scaled(const MemoryWeights& w, const std::vector<torch::Tensor>& sc) {
  MemoryWeights out;
  for (size_t l = 0; l < w.size(); ++l) out.push_back(sc[l].defined() ? w[l] * sc[l] : w[l]);
  return out;
}

// Gate broadcast onto a matrix: l = 0 (W_2 [hid, d]) on the input axis, l = 1 (W_1 [d, hid]) on the output axis.
torch::Tensor gate_on(const torch::Tensor& g /*[B, H, G]*/, size_t l) {
  return l == 0 ? g.unsqueeze(-2) : g.unsqueeze(-1);
}

// Rank-1 terms of the tokens z (keys) at weights w.
RankOneTerms grad_terms(const Prepared& p, const MemoryWeights& w, const torch::Tensor& K, const torch::Tensor& V,
                        const torch::Tensor& delta, const MirasOptions& o) {
  auto acts = memory_forward(p.spec, w, K, p.norm);
  auto g = miras_bias_gradient(acts.out - V, delta, o);
  return memory_grad_terms(p.spec, w, acts, g, p.norm);
}

MirasResult finish(const Prepared& p, std::vector<torch::Tensor> outs, MirasState st, const torch::Tensor& v) {
  MirasResult r;
  r.o = outs.empty() ? v.narrow(1, 0, 0) : torch::cat(outs, 2).transpose(1, 2).contiguous().to(v.scalar_type());
  r.state = std::move(st);
  (void)p;
  return r;
}

}  // namespace miras_detail

torch::Tensor miras_bias_gradient(const torch::Tensor& e, const torch::Tensor& delta, const MirasOptions& o,
                                  torch::Tensor* huber_switch) {
  if (o.bias == "l2") return e;
  if (o.bias == "lp") return o.p * e * (e * e + o.lp_eps).pow((o.p - 2.0) / 2.0);
  auto dl = delta.unsqueeze(-1);
  torch::Tensor mask;
  {
    torch::NoGradGuard no_grad;
    auto rms = e.pow(2).mean(-1, true).sqrt();
    mask = (rms <= dl).to(e.scalar_type());
  }
  if (huber_switch) *huber_switch = mask;
  return mask * e + (1.0 - mask) * dl * e / torch::sqrt(e * e + o.huber_eps);
}

torch::Tensor miras_lq_normaliser(const torch::Tensor& A, double q) {
  if (q == 2.0) return torch::ones({A.size(0), A.size(1), 1, 1}, A.options());
  auto s = A.abs().pow(q).sum({-2, -1}, true);  // Σ |A|^q
  return s.pow((q - 2.0) / q);
}

}  // namespace mnemo
