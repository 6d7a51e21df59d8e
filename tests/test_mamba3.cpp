// Mamba-3 SISO kernels (docs/models.md#mamba-3): chunked form == token-by-token form in fp64 (outputs, every part
// of the final state, every input gradient), partial last chunks, the state passed across a split and into
// single-token decode steps, the reduction to the Mamba-2 SSD (λ = 1, no rotation), the rotation's invariance of
// q̃ · k̃ and refused shapes. The mixer's causality, decode == forward and gradients are in the mixer contract
// (tests/test_mixer_contract.cpp), the fixtures in tests/test_kernel_fixtures.cpp.
#include <catch2/catch.hpp>

#include <cmath>

#include "runtime/mamba2/mamba2.h"
#include "runtime/mamba3/mamba3.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace mamba3_test {

constexpr double kGradFloor = 1e-6;

struct Case {
  Mamba3Inputs in;
  Mamba3State s0;
  std::vector<torch::Tensor> leaves() const {
    std::vector<torch::Tensor> out = {in.q, in.k, in.v, in.a, in.dt, in.lambda, in.theta};
    for (const auto& t : {s0.h, s0.k_prev, s0.v_prev, s0.angle})
      if (t.defined()) out.push_back(t);
    return out;
  }
};

// N = 8 channels with R = 3 rotated pairs (one pair left unrotated), P = 6, Δ = softplus(N − 1),
// a = −softplus(N) Δ · decay_scale, λ = σ(N), θ = π tanh(N).
Case make_case(int64_t B, int64_t T, int64_t H, bool with_state, uint64_t seed, double decay_scale = 1.0) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t N = 8, P = 6, R = 3;
  auto leaf = [](const torch::Tensor& t) { return t.detach().requires_grad_(); };
  Case c;
  auto dt = torch::softplus(torch::randn({B, T, H}, o) - 1.0);
  c.in = {leaf(torch::randn({B, T, H, N}, o)), leaf(torch::randn({B, T, H, N}, o)), leaf(torch::randn({B, T, H, P}, o)),
          leaf(-torch::softplus(torch::randn({B, T, H}, o)) * dt * decay_scale), leaf(dt),
          leaf(torch::sigmoid(torch::randn({B, T, H}, o))), leaf(torch::tanh(torch::randn({B, T, H, R}, o)) * M_PI)};
  if (with_state)
    c.s0 = {leaf(torch::randn({B, H, P, N}, o)), leaf(torch::randn({B, H, N}, o)), leaf(torch::randn({B, H, P}, o)),
            leaf(torch::rand({B, H, R}, o) * 2 * M_PI)};
  return c;
}

struct Run {
  std::vector<torch::Tensor> values, grads;  // o, h, k_prev, v_prev, angle; gradients of every leaf
};

// chunk 0: the token-by-token form; mimo: the MIMO forms; route: the SISO chunk form's scan.
Run run(const Case& c, int64_t chunk, bool mimo = false, GlaChunkRoute route = GlaChunkRoute::kEager) {
  auto r = mimo ? (chunk == 0 ? mamba3_mimo_recurrent(c.in, c.s0) : mamba3_mimo_chunk(c.in, c.s0, chunk))
                : (chunk == 0 ? mamba3_recurrent(c.in, c.s0) : mamba3_chunk(c.in, c.s0, chunk, route));
  std::vector<torch::Tensor> values = {r.o, r.state.h, r.state.k_prev, r.state.v_prev, r.state.angle};
  torch::manual_seed(1234);
  torch::Tensor loss;
  for (const auto& v : values) {
    auto term = (v * torch::randn(v.sizes(), v.options())).sum();
    loss = loss.defined() ? loss + term : term;
  }
  Run out{{}, torch::autograd::grad({loss}, c.leaves())};
  for (const auto& v : values) out.values.push_back(v.detach());
  return out;
}

void check_same(const Run& got, const Run& ref) {
  for (size_t i = 0; i < ref.values.size(); ++i) {
    CAPTURE(i);
    CHECK(max_rel_err(got.values[i], ref.values[i]) <= 1e-10);
  }
  REQUIRE(got.grads.size() == ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    CAPTURE(i);
    CHECK(max_rel_err(got.grads[i], ref.grads[i], kGradFloor) <= 1e-8);
  }
}

// MIMO of rank K: q, k [B, T, K, H, 8], v [B, T, K, H, 6], the same gates as the SISO cases.
Case make_mimo_case(int64_t B, int64_t T, int64_t K, int64_t H, bool with_state, uint64_t seed) {
  Case siso = make_case(B, T, H, false, seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t N = 8, P = 6, R = 3;
  auto leaf = [](const torch::Tensor& t) { return t.detach().requires_grad_(); };
  Case c;
  c.in = {leaf(torch::randn({B, T, K, H, N}, o)), leaf(torch::randn({B, T, K, H, N}, o)),
          leaf(torch::randn({B, T, K, H, P}, o)),  siso.in.a, siso.in.dt, siso.in.lambda, siso.in.theta};
  if (with_state)
    c.s0 = {leaf(torch::randn({B, H, P, N}, o)), leaf(torch::randn({B, K, H, N}, o)), leaf(torch::randn({B, K, H, P}, o)),
            leaf(torch::rand({B, H, R}, o) * 2 * M_PI)};
  return c;
}

// One chunked pass == two chunked passes with the state handed on, then single-token decode steps (the O(1) step)
// for the last 4 tokens: outputs and every state part.
void check_continuation(const Case& c, bool mimo) {
  auto chunk = [&](const Mamba3Inputs& in, const Mamba3State& s0) {
    return mimo ? mamba3_mimo_chunk(in, s0, 16) : mamba3_chunk(in, s0, 16);
  };
  auto part = [](const Mamba3Inputs& in, int64_t start, int64_t len) {
    auto n = [&](const torch::Tensor& t) { return t.narrow(1, start, len); };
    return Mamba3Inputs{n(in.q), n(in.k), n(in.v), n(in.a), n(in.dt), n(in.lambda), n(in.theta)};
  };
  const int64_t T = c.in.q.size(1), split = T / 2 - 4, decoded = T - 4;
  auto whole = chunk(c.in, c.s0);
  auto first = chunk(part(c.in, 0, split), c.s0);
  auto second = chunk(part(c.in, split, decoded - split), first.state);
  std::vector<torch::Tensor> outs = {first.o, second.o};
  auto state = second.state;
  for (int64_t t = decoded; t < T; ++t) {
    auto step = mimo ? mamba3_mimo_recurrent(part(c.in, t, 1), state) : mamba3_recurrent(part(c.in, t, 1), state);
    outs.push_back(step.o);
    state = step.state;
  }
  CHECK(max_rel_err(torch::cat(outs, 1), whole.o) <= 1e-12);
  CHECK(max_rel_err(state.h, whole.state.h) <= 1e-12);
  CHECK(max_rel_err(state.k_prev, whole.state.k_prev) <= 1e-12);
  CHECK(max_rel_err(state.v_prev, whole.state.v_prev) <= 1e-12);
  CHECK(max_rel_err(state.angle, whole.state.angle) <= 1e-12);
}

}  // namespace mamba3_test

TEST_CASE("mamba3 MIMO: chunk form equals the recurrence in fp64 (outputs, final state, gradients)", "[mamba3]") {
  for (int64_t K : {1, 3}) {
    for (int64_t T : {1, 9, 40}) {
      for (bool with_state : {false, true}) {
        auto c = mamba3_test::make_mimo_case(2, T, K, 2, with_state, 80 + T + K);
        auto ref = mamba3_test::run(c, 0, true);
        for (int64_t C : {16, 5}) {
          CAPTURE(K, T, with_state, C);
          mamba3_test::check_same(mamba3_test::run(c, C, true), ref);
        }
      }
    }
  }
}

TEST_CASE("mamba3 MIMO of rank 1 is the SISO scan with the halves rotation (channels permuted to adjacent pairs)",
          "[mamba3]") {
  auto c = mamba3_test::make_mimo_case(2, 12, 1, 2, true, 91);
  auto mimo = mamba3_mimo_chunk(c.in, c.s0, 4);
  // Halves pairs (i, i + 4) of N = 8 become adjacent pairs (2i, 2i + 1): channel order 0 4 1 5 2 6 3 7.
  auto order = torch::tensor(std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3, 7});
  auto adjacent = [&](const torch::Tensor& x) { return x.index_select(-1, order); };
  Mamba3Inputs siso{adjacent(c.in.q.squeeze(2)), adjacent(c.in.k.squeeze(2)), c.in.v.squeeze(2), c.in.a, c.in.dt,
                    c.in.lambda, c.in.theta};
  Mamba3State s0{c.s0.h.index_select(-1, order), adjacent(c.s0.k_prev.squeeze(1)), c.s0.v_prev.squeeze(1), c.s0.angle};
  auto ref = mamba3_recurrent(siso, s0);
  CHECK(max_rel_err(mimo.o.squeeze(2), ref.o) <= 1e-12);
  CHECK(max_rel_err(mimo.state.h.index_select(-1, order), ref.state.h) <= 1e-12);
}

TEST_CASE("mamba3 MIMO: the state passed across a split and into decode steps continues one pass", "[mamba3]") {
  mamba3_test::check_continuation(mamba3_test::make_mimo_case(1, 30, 2, 2, true, 93), true);
}

TEST_CASE("mamba3 MIMO layer (mamba_mimo_rank 2): causal, decode equals forward, gradients reach every parameter",
          "[mamba3][contract]") {
  for (bool outproj_norm : {false, true}) {
    CAPTURE(outproj_norm);
    const json args = {{"mamba_mimo_rank", 2}, {"mamba_head_dim", 8}, {"mamba_d_state", 8}, {"chunk_size", 4},
                       {"mamba_outproj_norm", outproj_norm}};
    auto m = mnemo::test::make_mixer("mamba3", 16, 2, args, 5);
    mnemo::test::require_layer_contract(*m, 16, [](const LayerState& state) {
      CHECK(state.tensors.at("k_prev").size(1) == 2);  // one key per rank
    });
    CHECK(m->named_parameters().contains("mimo_x"));
  }
  CHECK_THROWS_WITH(mnemo::test::make_mixer("mamba3", 16, 2, {{"mamba_mimo_rank", -1}, {"mamba_head_dim", 8}}),
                    Catch::Contains("mamba_mimo_rank"));
}

TEST_CASE("mamba3: chunk form, eager and on GLA's fused kernels (host grid), equals the recurrence in fp64 (outputs, "
          "final state, gradients)",
          "[mamba3]") {
  // kFusedKernel: the route the mixer takes on a GPU, the block code the CUDA kernels run over the host grid.
  for (int64_t T : {1, 7, 63, 100}) {
    for (bool with_state : {false, true}) {
      auto c = mamba3_test::make_case(2, T, 2, with_state, 60 + T);
      auto ref = mamba3_test::run(c, 0);
      for (int64_t C : {16, 64, 7}) {
        for (auto route : {GlaChunkRoute::kEager, GlaChunkRoute::kFusedKernel}) {
          CAPTURE(T, with_state, C, route == GlaChunkRoute::kFusedKernel);
          mamba3_test::check_same(mamba3_test::run(c, C, false, route), ref);
        }
      }
    }
  }
}

TEST_CASE("mamba3: strong decay (past the factorisation limit) stays exact and finite", "[mamba3]") {
  auto c = mamba3_test::make_case(1, 80, 2, true, 71, 30.0);
  auto ref = mamba3_test::run(c, 0);
  for (auto route : {GlaChunkRoute::kEager, GlaChunkRoute::kFusedKernel}) {
    CAPTURE(route == GlaChunkRoute::kFusedKernel);
    auto got = mamba3_test::run(c, 64, false, route);
    mamba3_test::check_same(got, ref);
    for (const auto& g : got.grads) CHECK(torch::isfinite(g).all().item<bool>());
  }
}

TEST_CASE("mamba3: one pass equals two halves with the state passed on, and decode steps continue it", "[mamba3]") {
  mamba3_test::check_continuation(mamba3_test::make_case(2, 50, 2, true, 72), false);
}

TEST_CASE("mamba3 with lambda = 1 and no rotation is the Mamba-2 SSD", "[mamba3]") {
  auto c = mamba3_test::make_case(2, 37, 2, false, 73);
  torch::NoGradGuard no_grad;
  // λ = 1: β = 0 and γ = Δ; θ = 0: q̃ = q, k̃ = k. Mamba-2 with A = −1 and Δ' = −a has the decay e^{a}, so its
  // input Δ' x must equal Δ v: x = v Δ / Δ'.
  auto in = c.in;
  in.lambda = torch::ones_like(in.lambda);
  in.theta = torch::zeros_like(in.theta);
  auto dt2 = -in.a;
  auto x = in.v * (in.dt / dt2).unsqueeze(-1);
  auto ssd = mamba2_ssd_recurrent(x, dt2, -torch::ones({2}, torch::kFloat64), in.k, in.q);
  for (int64_t C : {0, 16}) {
    CAPTURE(C);
    auto r = C == 0 ? mamba3_recurrent(in) : mamba3_chunk(in, {}, C);
    CHECK(max_rel_err(r.o, ssd.o) <= 1e-12);
    CHECK(max_rel_err(r.state.h, ssd.final_state) <= 1e-12);
  }
}

TEST_CASE("mamba3: the rotation keeps dot products of a query and a key at the same angle", "[mamba3]") {
  torch::manual_seed(74);
  auto q = torch::randn({2, 5, 3, 8}, torch::kFloat64), k = torch::randn({2, 5, 3, 8}, torch::kFloat64);
  auto phi = torch::randn({2, 5, 3, 3}, torch::kFloat64) * 10;
  auto qr = mamba3_rotate(q, phi), kr = mamba3_rotate(k, phi);
  CHECK(max_rel_err((qr * kr).sum(-1), (q * k).sum(-1)) <= 1e-12);
  CHECK(max_rel_err(qr.narrow(-1, 6, 2), q.narrow(-1, 6, 2)) == 0.0);  // the pair past R is left alone
  CHECK(max_rel_err(qr.norm(2, -1), q.norm(2, -1)) <= 1e-12);
}

TEST_CASE("mamba3: bad shapes are refused naming the tensor", "[mamba3]") {
  auto c = mamba3_test::make_case(1, 5, 2, false, 75);
  auto in = c.in;
  in.lambda = in.lambda.detach().unsqueeze(-1);
  CHECK_THROWS_WITH(mamba3_recurrent(in), Catch::Contains("lambda"));
  in = c.in;
  in.theta = torch::zeros({1, 5, 2, 5}, torch::kFloat64);  // 5 angles need 10 channels, q/k have 8
  CHECK_THROWS_WITH(mamba3_chunk(in), Catch::Contains("theta"));
  Mamba3State bad;
  bad.k_prev = torch::zeros({1, 2, 7}, torch::kFloat64);
  CHECK_THROWS_WITH(mamba3_recurrent(c.in, bad), Catch::Contains("k_prev"));
  CHECK_THROWS_WITH(mamba3_chunk(c.in, {}, 0), Catch::Contains("chunk_size"));
}
