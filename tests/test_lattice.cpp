// Lattice (docs/models.md#lattice, docs/models.md#verification): the chunked approximation (17) == its token-by-token reference with
// the same chunk-start anchor (outputs, states, all gradients, fp64); C = 1 == the exact docs/models.md#lattice recurrence;
// slot norms preserved exactly at C = 1 and restored at chunk ends; state carried across splits;
// prefill + decode == full forward (mixer and model).
#include <catch2/catch.hpp>

#include "runtime/lattice/lattice.h"
#include "runtime/model.h"
#include "runtime/registry.h"
#include "engine/training/trainer.h"
#include "tests/test_util.h"
#include "tests/mixer_test_util.h"

using mnemo::test::make_mixer;
using mnemo::test::prefill_decode;

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace {

const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);

struct LIn {
  torch::Tensor q, k, v, ga, mu, S;
  std::vector<torch::Tensor> leaves() const { return {q, k, v, ga, mu, S}; }
};

LIn make_inputs(int64_t B, int64_t T, int64_t H, int64_t m, int64_t d, uint64_t seed) {
  torch::manual_seed(seed);
  LIn in;
  in.q = torch::randn({B, T, H, m}, f64).requires_grad_();
  in.k = (0.5 * torch::randn({B, T, H, m}, f64)).detach().requires_grad_();
  in.v = torch::randn({B, T, H, d}, f64).requires_grad_();
  in.ga = torch::sigmoid(torch::randn({B, T, H}, f64)).detach().requires_grad_();
  in.mu = torch::sigmoid(torch::randn({B, T, H}, f64) + 3.0).detach().requires_grad_();
  auto s = std::get<0>(torch::linalg_qr(torch::randn({B, H, d, m}, f64))).transpose(-1, -2);
  in.S = (s * (1.0 + torch::rand({B, H, m, 1}, f64))).contiguous().detach().requires_grad_();  // non-unit norms
  return in;
}

LatticeResult call(const LIn& in, const std::string& form, int64_t C, bool dec) {
  LatticeState st{in.S, in.S, 0};
  if (form == "exact") return lattice_exact(in.q, in.k, in.v, in.ga, in.mu, in.S, dec);
  if (form == "chunk") return lattice_chunk(in.q, in.k, in.v, in.ga, in.mu, st, C, dec);
  return lattice_recurrent(in.q, in.k, in.v, in.ga, in.mu, st, C, dec);
}

struct Out {
  torch::Tensor y, S;
  std::vector<torch::Tensor> grads;
};

Out run(const LIn& in, const std::string& form, int64_t C, bool dec) {
  auto r = call(in, form, C, dec);
  torch::manual_seed(99);
  auto loss = (r.y * torch::randn(r.y.sizes(), f64)).sum() + (r.state.S * torch::randn(r.state.S.sizes(), f64)).sum();
  return {r.y.detach(), r.state.S.detach(), torch::autograd::grad({loss}, in.leaves())};
}

}  // namespace

TEST_CASE("lattice: chunked (17) equals the token-by-token anchor reference in fp64 (outputs, state, gradients)",
          "[lattice]") {
  double worst = 0;
  for (bool dec : {true, false})
    for (int64_t C : {1, 3, 4, 16})
      for (int64_t T : {1, 7, 20}) {
        CAPTURE(dec, C, T);
        auto in = make_inputs(2, T, 2, 5, 6, 10 + C + T);
        auto a = run(in, "chunk", C, dec), b = run(in, "recurrent", C, dec);
        CHECK(torch::isfinite(a.y).all().item<bool>());
        worst = std::max({worst, max_rel_err(a.y, b.y), max_rel_err(a.S, b.S)});
        CHECK(max_rel_err(a.y, b.y) <= 1e-10);
        CHECK(max_rel_err(a.S, b.S) <= 1e-10);
        for (size_t i = 0; i < a.grads.size(); ++i) {
          CAPTURE(i);
          worst = std::max(worst, max_rel_err(a.grads[i], b.grads[i]));
          CHECK(max_rel_err(a.grads[i], b.grads[i]) <= 1e-8);
        }
      }
  WARN("lattice chunk vs recurrent: max rel err " << worst);
}

TEST_CASE("lattice: C = 1 equals the exact recurrence, slot norms preserved at C = 1 and restored at chunk ends",
          "[lattice]") {
  for (bool dec : {true, false}) {
    CAPTURE(dec);
    auto in = make_inputs(2, 24, 2, 4, 8, 5);
    auto ex = run(in, "exact", 1, dec), c1 = run(in, "chunk", 1, dec);
    WARN("lattice C=1 chunk vs exact (dec=" << dec << "): y " << max_rel_err(c1.y, ex.y) << ", grads "
                                              << max_rel_err(c1.grads[5], ex.grads[5]));
    CHECK(max_rel_err(c1.y, ex.y) <= 1e-10);
    CHECK(max_rel_err(c1.S, ex.S) <= 1e-10);
    for (size_t i = 0; i < ex.grads.size(); ++i) CHECK(max_rel_err(c1.grads[i], ex.grads[i]) <= 1e-8);
    // exact recurrence: every slot keeps its norm, token after token
    torch::NoGradGuard ng;
    auto n0 = in.S.norm(2, {-1});
    auto S = in.S.detach();
    double drift = 0;
    for (int64_t t = 0; t < 24; ++t) {
      auto r = lattice_exact(in.q.narrow(1, t, 1), in.k.narrow(1, t, 1), in.v.narrow(1, t, 1), in.ga.narrow(1, t, 1),
                             in.mu.narrow(1, t, 1), S, dec);
      S = r.state.S;
      drift = std::max(drift, max_rel_err(S.norm(2, {-1}), n0));
    }
    WARN("lattice exact: max slot-norm drift over 24 tokens " << drift);
    CHECK(drift <= 1e-10);
    // C = 4: norms drift inside a chunk and are restored at each chunk end
    auto c4 = call(in, "chunk", 4, dec);
    CHECK(max_rel_err(c4.state.S.norm(2, {-1}), n0) <= 1e-12);
    auto mid = lattice_chunk(in.q.narrow(1, 0, 6), in.k.narrow(1, 0, 6), in.v.narrow(1, 0, 6), in.ga.narrow(1, 0, 6),
                             in.mu.narrow(1, 0, 6), {in.S, in.S, 0}, 4, dec);
    CHECK(mid.state.pos == 2);
    CHECK(max_rel_err(mid.state.S0.norm(2, {-1}), n0) <= 1e-12);
  }
}

TEST_CASE("lattice: two calls with the carried state equal one call (splits inside a chunk)", "[lattice]") {
  torch::NoGradGuard ng;
  for (bool dec : {true, false})
    for (int64_t split : {1, 5, 8, 13}) {
      CAPTURE(dec, split);
      auto in = make_inputs(2, 19, 2, 4, 6, 21);
      const int64_t T = 19;
      auto full = call(in, "chunk", 4, dec);
      auto n = [&](const torch::Tensor& t, int64_t a, int64_t l) { return t.narrow(1, a, l); };
      auto r1 = lattice_chunk(n(in.q, 0, split), n(in.k, 0, split), n(in.v, 0, split), n(in.ga, 0, split),
                              n(in.mu, 0, split), {in.S, in.S, 0}, 4, dec);
      const int64_t L = T - split;
      auto r2 = lattice_chunk(n(in.q, split, L), n(in.k, split, L), n(in.v, split, L), n(in.ga, split, L),
                              n(in.mu, split, L), r1.state, 4, dec);
      CHECK(max_rel_err(torch::cat({r1.y, r2.y}, 1), full.y) <= 1e-10);
      CHECK(max_rel_err(r2.state.S, full.state.S) <= 1e-10);
      CHECK(r2.state.pos == full.state.pos);
    }
}

TEST_CASE("lattice mixers and model: prefill + decode equals the full forward (fp64)", "[lattice]") {
  for (const std::string fam : {"lattice_dec", "lattice_dot"})
    for (int64_t C : {1, 4}) {
      torch::manual_seed(3);
      auto m = make_mixer(fam, 16, 2, {{"chunk_size", C}});
      auto x = torch::randn({2, 11, 16}, f64);
      torch::NoGradGuard ng;
      auto full = m->forward(x, nullptr);
      REQUIRE(full.sizes() == x.sizes());
      CHECK(torch::isfinite(full).all().item<bool>());
      for (int64_t p : {0, 1, 6}) {
        CAPTURE(fam, C, p);
        CHECK(max_rel_err(prefill_decode(*m, x, p), full) <= 1e-10);
      }
      auto rec = make_mixer(fam, 16, 2, {{"chunk_size", C}, {"form", "recurrent"}});
      auto src = m->named_parameters(), dst = rec->named_parameters();
      for (const auto& p : src) dst[p.key()].copy_(p.value());
      CHECK(max_rel_err(rec->forward(x, nullptr), full) <= 1e-10);
    }
  auto cfg = model_config_from_json({{"model", "lattice_dec"}, {"vocab_size", 32}, {"d_model", 16}, {"n_layers", 2},
                                     {"n_heads", 2}, {"chunk_size", 4}});
  torch::manual_seed(5);
  LanguageModel model(cfg);
  model->to(torch::kFloat64);
  auto ids = torch::randint(0, 32, {2, 13}, torch::kLong);
  torch::NoGradGuard ng;
  auto full = model->forward(ids);
  ModelState st;
  std::vector<torch::Tensor> pieces = {model->forward(ids.narrow(1, 0, 5), &st)};
  for (int64_t t = 5; t < 13; ++t) pieces.push_back(model->forward(ids.narrow(1, t, 1), &st));
  const double err = max_rel_err(torch::cat(pieces, 1), full);
  WARN("lattice_dec model prefill+decode vs full: " << err);
  CHECK(err <= 1e-10);
  CHECK_THROWS_WITH(make_mixer("lattice_dec", 16, 2, {{"chunk_size", 0}}), Catch::Contains("chunk_size"));
}
