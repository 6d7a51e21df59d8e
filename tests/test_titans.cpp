// Titans deep memory (docs/models.md#deep-memory, docs/models.md#titans, docs/models.md#verification): deep-memory core (closed-form gradients vs autograd,
// dual form vs materialised per-token weights), LMM kernel (chunk == token-by-token reference incl. gradients,
// chunk size 1 == online GD, state carry), reduction to the delta rule, mixers (prefill + decode == full
// forward, causality), and a short MQAR training run.
#include <catch2/catch.hpp>

#include <cmath>

#include "runtime/deep_memory/memory.h"
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/model.h"
#include "runtime/registry.h"
#include "runtime/titans/titans.h"
#include "engine/training/trainer.h"
#include "tests/test_util.h"
#include "tests/mixer_test_util.h"

using mnemo::test::make_mixer;
using mnemo::test::prefill_decode;

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace {

const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);

DeepMemorySpec make_spec(MemoryKind kind, int64_t d) {
  DeepMemorySpec s;
  s.kind = kind;
  s.d_in = s.d_out = d;
  s.expansion = 4;
  return s;
}

MemoryWeights random_weights(const DeepMemorySpec& spec, int64_t B, int64_t H, double scale, bool grad) {
  MemoryWeights w;
  for (const auto& sh : spec.weight_shapes()) {
    auto t = torch::randn({B, H, sh[0], sh[1]}, f64) * scale;
    w.push_back(grad ? t.requires_grad_() : t);
  }
  return w;
}

const MemoryKind all_kinds[] = {MemoryKind::Linear, MemoryKind::ResidualMLP, MemoryKind::ResidualMLP_LN};

}  // namespace

TEST_CASE("deep memory: closed-form inner gradients equal autograd for every memory kind", "[titans]") {
  torch::manual_seed(1);
  const int64_t B = 2, H = 2, N = 5, d = 4;
  for (auto kind : all_kinds) {
    CAPTURE(memory_kind_name(kind));
    auto spec = make_spec(kind, d);
    auto w = random_weights(spec, B, H, 0.5, true);
    MemoryNorm norm{1.0 + 0.3 * torch::randn({H, 1, d}, f64), 0.2 * torch::randn({H, 1, d}, f64)};
    auto z = torch::randn({B, H, N, d}, f64), v = torch::randn({B, H, N, d}, f64);
    auto c = torch::rand({B, H, N}, f64);  // per-token loss weights
    auto r = torch::randn({B, H, N, d}, f64);
    // ℓ2 (g_y = e) and a linear functional ℓ = <M(z), r> (g_y = r, the hook for ℓp / Huber / dot-product).
    for (int which = 0; which < 2; ++which) {
      CAPTURE(which);
      auto acts = memory_forward(spec, w, z, norm);
      auto e = acts.out - v;
      auto loss = which == 0 ? (c * 0.5 * e.pow(2).sum(-1)).sum() : (c.unsqueeze(-1) * acts.out * r).sum();
      auto ref = torch::autograd::grad({loss}, {w.begin(), w.end()});
      auto g_y = which == 0 ? e.detach() : r;
      auto terms = memory_grad_terms(spec, w, acts, g_y, norm);
      auto got = weighted_outer_sum(terms, c);
      REQUIRE(got.size() == ref.size());
      for (size_t l = 0; l < ref.size(); ++l) CHECK(max_rel_err(got[l], ref[l]) <= 1e-12);
      // per-token materialisation agrees with the weighted sum
      auto per = per_token_grads(terms);
      for (size_t l = 0; l < ref.size(); ++l)
        CHECK(max_rel_err((per[l] * c.unsqueeze(-1).unsqueeze(-1)).sum(2), ref[l]) <= 1e-12);
    }
  }
}

TEST_CASE("deep memory: dual-form read-out equals materialised per-token weights", "[titans]") {
  torch::manual_seed(2);
  const int64_t B = 2, H = 3, b = 7, d = 4;
  for (auto kind : all_kinds) {
    for (bool momentum : {false, true}) {
      CAPTURE(memory_kind_name(kind), momentum);
      auto spec = make_spec(kind, d);
      MemoryNorm norm{1.0 + 0.3 * torch::randn({H, 1, d}, f64), 0.2 * torch::randn({H, 1, d}, f64)};
      auto base = random_weights(spec, B, H, 0.4, false);
      auto anchor = random_weights(spec, B, H, 0.4, false);  // gradients at an anchor != base (mid-chunk entry)
      auto mom = momentum ? random_weights(spec, B, H, 0.1, false) : MemoryWeights{};
      auto k = torch::randn({B, H, b, d}, f64), v = torch::randn({B, H, b, d}, f64);
      auto q = torch::randn({B, H, b, d}, f64);
      auto acts = memory_forward(spec, anchor, k, norm);
      auto terms = memory_grad_terms(spec, anchor, acts, acts.out - v, norm);
      auto lk = torch::log_sigmoid(torch::randn({B, H, b}, f64) - 2.0);
      auto le = momentum ? torch::log_sigmoid(torch::randn({B, H, b}, f64) + 1.0) : torch::Tensor();
      auto th = 0.5 * torch::rand({B, H, b}, f64);
      auto coef = momentum_chunk_coefficients(lk, le, th);
      auto y = dual_form_readout(spec, base, mom, coef.dual, terms, q, norm);

      // Reference: the recurrence S ← η S - θ u, W ← (1-α) W + S with materialised weights per token.
      MemoryWeights W = base, S = mom;
      auto per = per_token_grads(terms);
      std::vector<torch::Tensor> ys;
      for (int64_t t = 0; t < b; ++t) {
        auto e = [&](const torch::Tensor& x) { return x.select(2, t).unsqueeze(-1).unsqueeze(-1); };
        for (size_t l = 0; l < W.size(); ++l) {
          auto step = -e(th) * per[l].select(2, t);
          if (momentum) S[l] = e(le.exp()) * S[l] + step;
          auto s_l = momentum ? S[l] : step;
          W[l] = e(lk.exp()) * W[l] + s_l;
        }
        ys.push_back(memory_apply(spec, W, q.narrow(2, t, 1), norm));
      }
      CHECK(max_rel_err(y, torch::cat(ys, 2)) <= 1e-11);
      // Chunk-end materialisation.
      auto last = [&](const torch::Tensor& x) { return x.defined() ? x.select(2, b - 1) : x; };
      auto w_end = combine_state(base, mom, last(coef.dual.A), last(coef.dual.D), terms, coef.dual.C.select(2, b - 1));
      for (size_t l = 0; l < W.size(); ++l) CHECK(max_rel_err(w_end[l], W[l]) <= 1e-11);
      if (momentum) {
        auto s_end = combine_state(mom, {}, last(coef.mom_keep), {}, terms, coef.mom_c.select(2, b - 1));
        for (size_t l = 0; l < S.size(); ++l) CHECK(max_rel_err(s_end[l], S[l]) <= 1e-11);
      }
    }
  }
}

namespace {

struct LmmInputs {
  torch::Tensor q, k, v, lk, le, th;
  MemoryWeights w0;
};

LmmInputs lmm_inputs(const DeepMemorySpec& spec, int64_t B, int64_t T, int64_t H, bool momentum, bool decay,
                     uint64_t seed) {
  torch::manual_seed(seed);
  LmmInputs in;
  const int64_t d = spec.d_in;
  in.q = l2norm(torch::randn({B, T, H, d}, f64)).detach().requires_grad_();
  in.k = l2norm(torch::randn({B, T, H, d}, f64)).detach().requires_grad_();
  in.v = torch::randn({B, T, H, d}, f64).requires_grad_();
  if (decay) in.lk = torch::log_sigmoid(-(torch::randn({B, T, H}, f64) - 2.0)).detach().requires_grad_();
  if (momentum) in.le = torch::log_sigmoid(torch::randn({B, T, H}, f64) + 1.0).detach().requires_grad_();
  in.th = (0.3 * torch::rand({B, T, H}, f64)).requires_grad_();
  in.w0 = random_weights(spec, B, H, 0.4, true);
  return in;
}

std::vector<torch::Tensor> lmm_leaves(const LmmInputs& in) {
  std::vector<torch::Tensor> out = {in.q, in.k, in.v, in.th};
  if (in.lk.defined()) out.push_back(in.lk);
  if (in.le.defined()) out.push_back(in.le);
  for (const auto& w : in.w0) out.push_back(w);
  return out;
}

struct LmmRun {
  torch::Tensor y;
  TitansMemoryState state;
  std::vector<torch::Tensor> grads;
};

LmmRun run_lmm(const DeepMemorySpec& spec, const LmmInputs& in, int64_t b, bool chunked, double clip = 0) {
  TitansMemoryState init;
  init.w = in.w0;
  auto r = chunked ? titans_lmm_chunk(spec, in.q, in.k, in.v, in.lk, in.le, in.th, init, b, clip)
                   : titans_lmm_recurrent(spec, in.q, in.k, in.v, in.lk, in.le, in.th, init, b, clip);
  torch::manual_seed(77);
  auto loss = (r.y * torch::randn(r.y.sizes(), f64)).sum();
  for (const auto& w : r.state.w) loss = loss + (w * torch::randn(w.sizes(), f64)).sum();
  for (const auto& s : r.state.s) loss = loss + (s * torch::randn(s.sizes(), f64)).sum();
  LmmRun out{r.y.detach(), r.state, torch::autograd::grad({loss}, lmm_leaves(in))};
  return out;
}

}  // namespace

TEST_CASE("titans kernel: chunked dual form equals the token-by-token reference (fp64, with gradients)",
          "[titans]") {
  const int64_t B = 2, H = 2, d = 4;
  const char* names[] = {"q", "k", "v", "theta", "log_keep/log_eta/w0", "...", "...", "..."};
  for (auto kind : {MemoryKind::Linear, MemoryKind::ResidualMLP}) {
    for (int flags = 0; flags < 4; ++flags) {
      const bool momentum = flags & 1, decay = flags & 2;
      for (int64_t T : {1, 7, 20}) {  // 20 with b = 8: a partial last chunk
        auto spec = make_spec(kind, d);
        auto in = lmm_inputs(spec, B, T, H, momentum, decay, 100 + T + 10 * flags);
        for (int64_t b : {1, 3, 8}) {
          CAPTURE(memory_kind_name(kind), momentum, decay, T, b);
          auto ref = run_lmm(spec, in, b, false);
          auto got = run_lmm(spec, in, b, true);
          CHECK(max_rel_err(got.y, ref.y) <= 1e-10);
          for (size_t l = 0; l < ref.state.w.size(); ++l) {
            CHECK(max_rel_err(got.state.w[l], ref.state.w[l]) <= 1e-10);
            CHECK(max_rel_err(got.state.anchor[l], ref.state.anchor[l]) <= 1e-10);
            if (momentum) CHECK(max_rel_err(got.state.s[l], ref.state.s[l]) <= 1e-10);
          }
          CHECK(got.state.offset == ref.state.offset);
          CHECK(got.state.offset == T % b);
          REQUIRE(got.grads.size() == ref.grads.size());
          for (size_t i = 0; i < ref.grads.size(); ++i) {
            CAPTURE(i, names[std::min<size_t>(i, 7)]);
            CHECK(max_rel_err(got.grads[i], ref.grads[i]) <= 1e-9);
          }
        }
      }
    }
  }
}

TEST_CASE("titans kernel: the inner-gradient clamp (docs/models.md#titans-inner-gradient-clamp) keeps chunked == token-by-token and bounds ||g||",
          "[titans]") {
  const int64_t B = 2, H = 2, d = 4, T = 20;
  auto spec = make_spec(MemoryKind::ResidualMLP, d);
  auto in = lmm_inputs(spec, B, T, H, true, true, 321);
  // τ below the typical per-token gradient norm, so the clamp is active on most tokens.
  TitansMemoryState init;
  init.w = in.w0;
  {
    torch::NoGradGuard g;
    auto acts = memory_forward(spec, in.w0, in.k.transpose(1, 2));
    auto terms = memory_grad_terms(spec, in.w0, acts, acts.out - in.v.transpose(1, 2));
    auto norm = [&](const RankOneTerms& t) {
      torch::Tensor sq;
      for (const auto& w : per_token_grads(t)) sq = sq.defined() ? sq + w.pow(2).sum({-2, -1}) : w.pow(2).sum({-2, -1});
      return sq.sqrt();  // [B, H, T]
    };
    const auto before = norm(terms), after = norm(clip_grad_terms(terms, 0.5));
    REQUIRE(before.gt(0.5).any().item<bool>());
    CHECK(after.max().item<double>() <= 0.5 + 1e-12);
    // Below τ a gradient is unchanged; above, it is scaled to norm τ with its direction kept.
    CHECK(torch::allclose(after, torch::clamp_max(before, 0.5), 1e-12, 1e-12));
    CHECK(max_rel_err(per_token_grads(clip_grad_terms(terms, 0))[0], per_token_grads(terms)[0]) == 0);
  }
  for (int64_t b : {1, 3, 8}) {
    CAPTURE(b);
    auto ref = run_lmm(spec, in, b, false, 0.5);
    auto got = run_lmm(spec, in, b, true, 0.5);
    CHECK(max_rel_err(got.y, ref.y) <= 1e-10);
    for (size_t l = 0; l < ref.state.w.size(); ++l) CHECK(max_rel_err(got.state.w[l], ref.state.w[l]) <= 1e-10);
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      CAPTURE(i);
      CHECK(torch::isfinite(got.grads[i]).all().item<bool>());
      CHECK(max_rel_err(got.grads[i], ref.grads[i]) <= 1e-9);
    }
    auto unclipped = run_lmm(spec, in, b, true, 0);
    CHECK(max_rel_err(got.y, unclipped.y) > 1e-6);  // the clamp changed the function
  }
  CHECK_THROWS_WITH(titans_lmm_chunk(spec, in.q, in.k, in.v, in.lk, in.le, in.th, init, 4, -1.0),
                    Catch::Contains("inner_grad_clip must be >= 0"));
}

TEST_CASE("titans kernel: chunk size 1 is fully online GD, state carried across calls equals one call",
          "[titans]") {
  const int64_t B = 1, H = 2, d = 4, T = 11;
  auto spec = make_spec(MemoryKind::ResidualMLP, d);
  auto in = lmm_inputs(spec, B, T, H, true, true, 5);
  torch::NoGradGuard no_grad;
  TitansMemoryState init;
  init.w = in.w0;
  auto full = titans_lmm_chunk(spec, in.q, in.k, in.v, in.lk, in.le, in.th, init, 1);

  // Online GD written out with autograd for the inner gradient at M_{t-1} (independent of the closed form).
  MemoryWeights W, S;
  for (const auto& w : in.w0) {
    W.push_back(w.detach().clone());
    S.push_back(torch::zeros_like(w));
  }
  std::vector<torch::Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    MemoryWeights Wg;
    for (const auto& w : W) Wg.push_back(w.clone().requires_grad_());
    torch::Tensor loss;
    {
      torch::AutoGradMode enable(true);
      auto e = memory_apply(spec, Wg, in.k.select(1, t).unsqueeze(2)) - in.v.select(1, t).unsqueeze(2);
      loss = 0.5 * e.pow(2).sum();
    }
    auto g = torch::autograd::grad({loss}, {Wg.begin(), Wg.end()});
    auto e4 = [&](const torch::Tensor& x) { return x.select(1, t).unsqueeze(-1).unsqueeze(-1); };
    for (size_t l = 0; l < W.size(); ++l) {
      S[l] = e4(in.le.exp()) * S[l] - e4(in.th) * g[l];
      W[l] = e4(in.lk.exp()) * W[l] + S[l];
    }
    ys.push_back(memory_apply(spec, W, in.q.select(1, t).unsqueeze(2)));
  }
  CHECK(max_rel_err(full.y, torch::cat(ys, 2).transpose(1, 2)) <= 1e-11);
  for (size_t l = 0; l < W.size(); ++l) CHECK(max_rel_err(full.state.w[l], W[l]) <= 1e-11);

  // Two calls (split inside a chunk) with the state carried == one call, chunked and recurrent.
  auto ref = titans_lmm_chunk(spec, in.q, in.k, in.v, in.lk, in.le, in.th, init, 4);
  for (int64_t split : {2, 4, 6}) {
    for (bool chunked : {true, false}) {
      CAPTURE(split, chunked);
      auto s = [&](const torch::Tensor& x, int64_t a, int64_t n) { return x.narrow(1, a, n); };
      auto run = [&](int64_t a, int64_t n, const TitansMemoryState& st) {
        return chunked ? titans_lmm_chunk(spec, s(in.q, a, n), s(in.k, a, n), s(in.v, a, n), s(in.lk, a, n),
                                          s(in.le, a, n), s(in.th, a, n), st, 4)
                       : titans_lmm_recurrent(spec, s(in.q, a, n), s(in.k, a, n), s(in.v, a, n), s(in.lk, a, n),
                                              s(in.le, a, n), s(in.th, a, n), st, 4);
      };
      auto first = run(0, split, init);
      auto second = run(split, T - split, first.state);
      CHECK(max_rel_err(torch::cat({first.y, second.y}, 1), ref.y) <= 1e-11);
      for (size_t l = 0; l < W.size(); ++l) CHECK(max_rel_err(second.state.w[l], ref.state.w[l]) <= 1e-11);
    }
  }
  CHECK_THROWS_WITH(titans_lmm_chunk(spec, in.q, in.k, in.v, in.lk, in.le, in.th, init, 0),
                    Catch::Contains("chunk_size"));
  CHECK_THROWS_WITH(titans_lmm_chunk(spec, in.q, in.k, in.v, in.lk, in.le, in.th.narrow(1, 0, 3), init, 4),
                    Catch::Contains("theta must be [B, T, H]"));
}

TEST_CASE("titans kernel: linear memory, no momentum, no decay, chunk size 1 equals the delta rule", "[titans]") {
  // With η ≡ 0, α ≡ 0 and L_M = 1: S_t = -θ_t (W^0 k_t - v_t) k_t^T and W_t = W_{t-1} + S_t. With chunk size 1
  // the anchor W^0 is W_{t-1}, so W_t = W_{t-1} + θ_t (v_t - W_{t-1} k_t) k_t^T: the delta rule with β = θ, read
  // after write, in fla's storage S = W^T ([B, H, d_k, d_v]) and q-scale 1. With b > 1 the gradients of a chunk
  // are all taken at the chunk start (mini-batch GD), which is a different function (checked below).
  const int64_t B = 2, T = 13, H = 2, d = 5;
  auto spec = make_spec(MemoryKind::Linear, d);
  auto in = lmm_inputs(spec, B, T, H, false, false, 9);
  torch::NoGradGuard no_grad;
  TitansMemoryState init;
  init.w = in.w0;
  auto titans = titans_lmm_chunk(spec, in.q, in.k, in.v, {}, {}, in.th, init, 1);
  auto delta = delta_rule_recurrent(in.q, in.k, in.v, in.th, {}, in.w0[0].transpose(-1, -2), 1.0);
  CHECK(max_rel_err(titans.y, delta.o) <= 1e-12);
  CHECK(max_rel_err(titans.state.w[0].transpose(-1, -2), delta.final_state) <= 1e-12);
  auto mini_batch = titans_lmm_chunk(spec, in.q, in.k, in.v, {}, {}, in.th, init, 4);
  CHECK(max_rel_err(mini_batch.y, delta.o) > 1e-6);
}

namespace {

const json tiny_lmm = {{"chunk_size", 4}, {"n_persistent", 2}};

}  // namespace

TEST_CASE("titans mixers: prefill + token-by-token decode equals the full forward (fp64)", "[titans]") {
  const int64_t T = 21;
  struct Case {
    std::string family;
    json args;
  };
  std::vector<Case> cases = {
      {"titans_lmm", tiny_lmm},
      {"titans_lmm", {{"chunk_size", 3}, {"n_persistent", 0}, {"memory_depth", 1}, {"use_momentum", false}}},
      {"titans_mag", {{"chunk_size", 4}, {"n_persistent", 2}, {"window", 5}}},
      {"titans_mag", {{"chunk_size", 4}, {"n_persistent", 0}, {"window", 64}}},
      {"titans_mac", {{"chunk_size", 4}, {"n_persistent", 2}, {"segment_size", 8}}},
      {"titans_mac", {{"chunk_size", 2}, {"n_persistent", 0}, {"segment_size", 4}}},
  };
  for (const auto& c : cases) {
    torch::manual_seed(3);
    auto m = make_mixer(c.family, 16, 2, c.args);
    auto x = torch::randn({2, T, 16}, f64);
    torch::NoGradGuard no_grad;
    auto full = m->forward(x, nullptr);
    REQUIRE(full.sizes() == x.sizes());
    for (int64_t prefill : {0, 1, 9, 16}) {
      CAPTURE(c.family, c.args.dump(), prefill);
      CHECK(max_rel_err(prefill_decode(*m, x, prefill), full) <= 1e-10);
    }
  }
  // The recurrent form is the same function.
  torch::manual_seed(4);
  auto chunked = make_mixer("titans_lmm", 16, 2, tiny_lmm);
  auto recurrent = make_mixer("titans_lmm", 16, 2, {{"chunk_size", 4}, {"n_persistent", 2}, {"form", "recurrent"}});
  auto src = chunked->named_parameters(), dst = recurrent->named_parameters();
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : src) dst[p.key()].copy_(p.value());
  }
  auto x = torch::randn({2, T, 16}, f64);
  CHECK(max_rel_err(recurrent->forward(x, nullptr), chunked->forward(x, nullptr)) <= 1e-10);
}

TEST_CASE("titans_mal model: prefill + decode equals the full forward, MAC/MAG/MAL are causal", "[titans]") {
  ModelConfig cfg;
  cfg.model = "titans_mal";
  cfg.vocab_size = 32;
  cfg.d_model = 16;
  cfg.n_layers = 2;
  cfg.n_heads = 2;
  cfg.mixer_args = {{"chunk_size", 4}, {"n_persistent", 2}, {"window", 5}, {"segment_size", 8}};
  torch::manual_seed(6);
  LanguageModel model(cfg);
  model->to(torch::kFloat64);
  const std::vector<std::string> expected_layers = {"titans_lmm", "swa"};
  REQUIRE(cfg.layer_mixers() == expected_layers);
  auto ids = torch::randint(0, 32, {2, 19}, torch::kInt64);
  torch::NoGradGuard no_grad;
  auto full = model->forward(ids);
  for (int64_t prefill : {1, 10}) {
    CAPTURE(prefill);
    ModelState st = model->initial_state();
    std::vector<torch::Tensor> pieces = {model->forward(ids.narrow(1, 0, prefill), &st)};
    for (int64_t t = prefill; t < 19; ++t) pieces.push_back(model->forward(ids.narrow(1, t, 1), &st));
    CHECK(max_rel_err(torch::cat(pieces, 1), full) <= 1e-10);
  }
  // Causality: changing tokens t+1.. leaves outputs 0..t unchanged (inside a MAC segment and across its boundary).
  for (int64_t t : {3, 7, 8, 12}) {
    CAPTURE(t);
    auto ids2 = ids.clone();
    ids2.narrow(1, t + 1, 19 - t - 1).random_(0, 32);
    auto out2 = model->forward(ids2);
    CHECK(max_rel_err(out2.narrow(1, 0, t + 1), full.narrow(1, 0, t + 1)) <= 1e-12);
    for (std::string family : {"titans_mac", "titans_mag"}) {
      CAPTURE(family);
      torch::manual_seed(8);
      auto m = make_mixer(family, 16, 2, test::declared_args(family, cfg.mixer_args));
      torch::manual_seed(9);
      auto x = torch::randn({2, 19, 16}, f64);
      auto x2 = x.clone();
      x2.narrow(1, t + 1, 19 - t - 1).normal_();
      auto a = m->forward(x, nullptr), b = m->forward(x2, nullptr);
      CHECK(max_rel_err(b.narrow(1, 0, t + 1), a.narrow(1, 0, t + 1)) <= 1e-12);
      CHECK(max_rel_err(b.narrow(1, t + 1, 19 - t - 1), a.narrow(1, t + 1, 19 - t - 1)) > 1e-6);
    }
  }
}

TEST_CASE("titans mixers: gradients reach every parameter, bad arguments name the field", "[titans]") {
  for (std::string family : {"titans_lmm", "titans_mag", "titans_mac"}) {
    CAPTURE(family);
    torch::manual_seed(10);
    auto m = make_mixer(family, 16, 2,
                        test::declared_args(family, {{"chunk_size", 4}, {"n_persistent", 2}, {"segment_size", 8}}));
    m->to(torch::kFloat32);
    auto x = torch::randn({2, 19, 16});
    m->forward(x, nullptr).pow(2).sum().backward();
    for (const auto& p : m->named_parameters()) {
      CAPTURE(p.key());
      REQUIRE(p.value().grad().defined());
      CHECK(torch::isfinite(p.value().grad()).all().item<bool>());
      CHECK(p.value().grad().abs().sum().item<double>() > 0);
    }
  }
  auto lmm = make_mixer("titans_lmm", 16, 2, json::object());
  auto params = lmm->named_parameters();
  CHECK(params["core.memory_init_0"].sizes() == torch::IntArrayRef({2, 32, 8}));  // W_2: 4 d_h × d_h per head
  CHECK(params["core.memory_init_1"].sizes() == torch::IntArrayRef({2, 8, 32}));
  CHECK(params["persistent"].sizes() == torch::IntArrayRef({4, 16}));
  auto bias = params["core.gate_proj.bias"].view({3, 2});
  CHECK(bias[0][0].item<double>() == -6.0);
  CHECK(bias[1][0].item<double>() == 2.0);
  CHECK(bias[2][0].item<double>() == 0.0);
  CHECK_THROWS_WITH(make_mixer("titans_lmm", 16, 2, {{"memory_depth", 3}}), Catch::Contains("memory_depth"));
  CHECK_THROWS_WITH(make_mixer("titans_lmm", 16, 2, {{"chunk_size", 0}}), Catch::Contains("chunk_size"));
  CHECK_THROWS_WITH(make_mixer("titans_lmm", 16, 2, {{"form", "x"}}), Catch::Contains("form"));
  CHECK_THROWS_WITH(make_mixer("titans_mac", 16, 2, {{"chunk_size", 4}, {"segment_size", 6}}),
                    Catch::Contains("segment_size"));
  CHECK_THROWS_WITH(make_mixer("titans_mag", 16, 2, {{"window", 0}}), Catch::Contains("window"));
  CHECK_THROWS_WITH(memory_kind_from_string("deep"), Catch::Contains("memory_kind"));
}

TEST_CASE("titans_lmm learns a small MQAR (V=64, L=32, 2 pairs, 1 layer) well above chance", "[titans][train]") {
  auto dir = test::temp_dir("titans_mqar");
  json cfg = {{"model", "titans_lmm"}, {"task", "mqar"}, {"vocab_size", 64}, {"seq_len", 32},
              {"num_kv_pairs", 2}, {"d_model", 32}, {"n_layers", 1}, {"n_heads", 2}, {"batch_size", 32},
              {"n_train", 4000}, {"n_test", 256}, {"lr", 1e-2}, {"steps", 150}, {"eval_every", 50},
              {"chunk_size", 16}, {"device", "cpu"}};
  TrainOptions opt;
  opt.db_path = (dir / "r.sqlite").string();
  opt.out_dir = (dir / "run").string();
  opt.quiet = true;
  auto r = train(cfg, opt);
  INFO("titans_lmm MQAR best test accuracy " << r.best_test_accuracy << " after " << r.steps << " steps, "
                                             << r.wall_s << " s");
  WARN("titans_lmm MQAR best test accuracy " << r.best_test_accuracy << " (final " << r.final_test_accuracy
                                             << ") after " << r.steps << " steps, " << r.wall_s << " s");
  // Values are drawn from V/2 = 32 tokens: chance is 1/32 ≈ 0.031. Observed with the default clamp τ = 3: 0.074 in
  // this binary, 0.100 from `mnemo train` with 2 threads (150 tiny steps are chaotic: rounding from the thread count
  // moves the result); with `mnemo train`, 2 threads: 0.119 with the clamp off, 0.070 with τ = 1. gated_deltanet
  // reaches 0.137 with the same budget. Assert more than twice chance.
  CHECK(r.best_test_accuracy >= 0.07);
}

TEST_CASE("titans_lmm at context 256 on real text: finite with the default inner-gradient clamp", "[titans][train]") {
  // Measured: with docs/models.md#titans-inner-gradient-clamp's clamp off, the first step on Gutenberg text at context 256 is NaN (a
  // 64-token chunk of anchor gradients, amplified by momentum, overshoots the inner loss's curvature, and the
  // two-layer memory's curvature grows each time the anchor is refreshed; fp64 too). The default clamp τ = 3 trains.
  auto dir = test::temp_dir("titans_ctx256");
  auto one_step = [&](const json& extra, const std::string& name) {
    json cfg = {{"model", "titans_lmm"}, {"task", "lm"}, {"d_model", 64}, {"n_heads", 2}, {"seq_len", 256},
                {"batch_size", 16}, {"steps", 1}, {"eval_every", 100}, {"val_tokens", 4096}, {"device", "cpu"}};
    cfg.update(extra);
    TrainOptions opt;
    opt.db_path = (dir / "r.sqlite").string();
    opt.out_dir = (dir / name).string();
    opt.quiet = true;
    return train(cfg, opt);
  };
  auto r = one_step(json::object(), "clamped");
  CHECK(std::isfinite(r.final_train_loss));
  // A record of why the default clamp is on (docs/models.md#titans-inner-gradient-clamp): if this stops failing, revisit it.
  CHECK_THROWS_WITH(one_step({{"inner_grad_clip", 0.0}}, "unclamped"), Catch::Contains("loss is"));
}
