// Log-linear Gated DeltaNet kernels (docs/models.md#log-linear-gated-deltanet): the chunked form equals the
// token-by-token Fenwick recurrence in fp64 (outputs, every level of the final state, every input gradient) for
// several T, chunk sizes, level counts, with and without an initial state at aligned and unaligned positions, in both
// modes (Gated DeltaNet transition and scalar decay); the recurrence equals the level-weighted quadratic form written
// from arXiv 2506.04761 §3–4; all level weights 1 give Gated DeltaNet; state passing across a split; bad inputs
// refused by name. fla's naive_log_linear_attn fixtures are in tests/test_kernel_fixtures.cpp, the mixer in the
// mixer contract.
#include <catch2/catch.hpp>

#include "engine/io/fla_import.h"
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/kernels/chunking.h"
#include "runtime/layers.h"
#include "runtime/log_linear_gdn/log_linear_gdn.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace log_linear_test {

struct LLInputs {
  torch::Tensor q, k, v, beta, g, lam, h0;  // beta undefined: scalar-decay mode; h0 undefined: no state
  std::vector<torch::Tensor> leaves() const {
    std::vector<torch::Tensor> out = {q, k, v, g, lam};
    if (beta.defined()) out.push_back(beta);
    if (h0.defined()) out.push_back(h0);
    return out;
  }
};

LLInputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, int64_t NL, bool delta, bool with_state,
                     uint64_t seed) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  LLInputs in;
  in.q = l2norm(torch::randn({B, T, H, K}, o)).detach().requires_grad_();
  in.k = l2norm(torch::randn({B, T, H, K}, o)).detach().requires_grad_();
  in.v = torch::randn({B, T, H, V}, o).requires_grad_();
  in.g = torch::log_sigmoid(torch::randn({B, T, H}, o) + 3.0).detach().requires_grad_();
  in.lam = (torch::rand({B, T, H, NL}, o) + 0.5).requires_grad_();
  if (delta) in.beta = torch::sigmoid(torch::randn({B, T, H}, o)).detach().requires_grad_();
  if (with_state) in.h0 = (0.3 * torch::randn({B, H, NL, K, V}, o)).detach().requires_grad_();
  return in;
}

struct LLRun {
  torch::Tensor o, state;
  std::vector<torch::Tensor> grads;
};

// Outputs, final state and the gradients of a fixed random linear functional of both w.r.t. every input.
LLRun run(const LLInputs& in, int64_t chunk, int64_t start) {
  auto r = chunk == 0 ? log_linear_gdn_recurrent(in.q, in.k, in.v, in.beta, in.g, in.lam, in.h0, start, 0.7)
                      : log_linear_gdn_chunk(in.q, in.k, in.v, in.beta, in.g, in.lam, in.h0, start, 0.7, chunk);
  torch::manual_seed(4321);
  auto wo = torch::randn(r.o.sizes(), r.o.options()), ws = torch::randn(r.final_state.sizes(), r.o.options());
  auto loss = (r.o * wo).sum() + (r.final_state * ws).sum();
  return {r.o.detach(), r.final_state.detach(), torch::autograd::grad({loss}, in.leaves(), {}, false, false, true)};
}

void check_same(const LLRun& got, const LLRun& ref) {
  CHECK(max_rel_err(got.o, ref.o) <= 1e-10);
  CHECK(max_rel_err(got.state, ref.state) <= 1e-10);
  REQUIRE(got.grads.size() == ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    CAPTURE(i);
    // An input that reaches nothing (g at T 1 without a state: it decays only earlier writes) has no gradient.
    if (!got.grads[i].defined() || !ref.grads[i].defined()) {
      CHECK(got.grads[i].defined() == ref.grads[i].defined());
      continue;
    }
    CHECK(max_rel_err(got.grads[i], ref.grads[i], 1e-6) <= 1e-8);
  }
}

// o_t = Σ_{s<=t} λ_t^(min(lev, NL-1)) (0.7 q_t) [Π_{r=s+1..t} A_r] β_s k_sᵀ v_s with A_r applied as the recurrence
// does (row-vector convention: S <- e^{g} (S − β kᵀ (k S))), brute force over every (t, s).
torch::Tensor quadratic_form(const LLInputs& in, int64_t start) {
  torch::NoGradGuard ng;
  const int64_t T = in.q.size(1), NL = in.lam.size(3);
  std::vector<torch::Tensor> outs;
  for (int64_t t = 0; t < T; ++t) {
    auto o = torch::zeros_like(in.v.select(1, 0));
    for (int64_t s = 0; s <= t; ++s) {
      auto ks = in.k.select(1, s);
      auto bs = in.beta.defined() ? in.beta.select(1, s) : torch::ones_like(in.g.select(1, s));
      auto S = (bs.unsqueeze(-1) * ks).unsqueeze(-1) * in.v.select(1, s).unsqueeze(-2);  // [B, H, K, V]
      for (int64_t r = s + 1; r <= t; ++r) {
        auto kr = in.k.select(1, r);
        S = S * in.g.select(1, r).exp().unsqueeze(-1).unsqueeze(-1);
        if (in.beta.defined())
          S = S - (in.beta.select(1, r).unsqueeze(-1) * kr).unsqueeze(-1) * torch::matmul(kr.unsqueeze(-2), S);
      }
      int64_t x = (start + t) ^ (start + s), lev = 0;
      for (; x > 0; x >>= 1) ++lev;
      lev = std::min(lev, NL - 1);
      auto read = torch::matmul(0.7 * in.q.select(1, t).unsqueeze(-2), S).squeeze(-2);
      o = o + in.lam.select(1, t).select(-1, lev).unsqueeze(-1) * read;
    }
    outs.push_back(o);
  }
  return torch::stack(outs, 1);
}

}  // namespace log_linear_test

using namespace log_linear_test;

TEST_CASE("log_linear_gdn: chunk form equals the recurrence in fp64 (outputs, all levels, gradients)",
          "[log_linear_gdn]") {
  // T 150 crosses chunk-level carries at C 4 and 16 (several levels above the chunk); T 63 / 100 end in a partial
  // chunk; start 37 is unaligned, 64 aligned (with a state the whole first chunk runs the recurrence).
  for (bool delta : {true, false}) {
    for (int64_t T : {1, 7, 63, 100, 150}) {
      for (int64_t start : {0, 37, 64}) {
        const bool with_state = start > 0;
        for (int64_t NL : {log_linear_num_levels(start + T), int64_t{3}}) {
          auto in = make_inputs(1, T, 2, 8, 6, NL, delta, with_state, 300 + T + start + NL);
          auto ref = run(in, 0, start);
          for (int64_t C : {4, 16, 64}) {
            CAPTURE(delta, T, start, NL, C);
            check_same(run(in, C, start), ref);
          }
        }
      }
    }
  }
}

TEST_CASE("log_linear_gdn: level states by chunk state passes equal the recurrence in fp64", "[log_linear_gdn][state_pass]") {
  // The GPU's route (scan_levels: one pass per group of levels, restarted at every block of 2^j chunks), here with the
  // state-pass kernel's block code over the host grid. T 150 at C 4 spans levels up to 9 (five restarted groups);
  // start 37 begins the chunks mid-block, NL 3 puts every level above the chunk in the top one.
  const StatePassKernelHostScope on_host(true);
  for (bool delta : {true, false}) {
    for (int64_t T : {7, 100, 150}) {
      for (int64_t start : {0, 37, 64}) {
        const bool with_state = start > 0;
        for (int64_t NL : {log_linear_num_levels(start + T), int64_t{3}}) {
          auto in = make_inputs(1, T, 2, 8, 6, NL, delta, with_state, 300 + T + start + NL);
          auto ref = run(in, 0, start);
          for (int64_t C : {4, 16}) {
            CAPTURE(delta, T, start, NL, C);
            const int64_t before = state_pass_kernel_passes();
            check_same(run(in, C, start), ref);
            CHECK(state_pass_kernel_passes() - before >= (T + start % C >= 2 * C ? 2 : 0));
          }
        }
      }
    }
  }
}

TEST_CASE("log_linear_gdn: the fixed-shape decode step equals the recurrence token by token", "[log_linear_gdn][decode]") {
  // The step a CUDA graph replays: every level read and updated, the carry by masks from a device position. 40
  // tokens after a 5-token prefill cross carries up to level 6; NL 3 merges the upper levels into the top one.
  for (bool delta : {true, false}) {
    for (int64_t NL : {log_linear_num_levels(45), int64_t{3}}) {
      CAPTURE(delta, NL);
      auto in = make_inputs(1, 45, 2, 8, 6, NL, delta, false, 700 + NL);
      const torch::NoGradGuard no_grad;
      auto ref = log_linear_gdn_recurrent(in.q, in.k, in.v, in.beta, in.g, in.lam, {}, 0, 0.7);
      auto piece = [&](const torch::Tensor& t, int64_t from, int64_t len) {
        return t.defined() ? t.narrow(1, from, len) : torch::Tensor();
      };
      auto state = log_linear_gdn_recurrent(piece(in.q, 0, 5), piece(in.k, 0, 5), piece(in.v, 0, 5),
                                            piece(in.beta, 0, 5), piece(in.g, 0, 5), piece(in.lam, 0, 5), {}, 0, 0.7)
                       .final_state;
      auto position = torch::full({1}, int64_t{5}, torch::kLong);
      for (int64_t t = 5; t < 45; ++t) {
        CAPTURE(t);
        auto r = log_linear_gdn_static_step(piece(in.q, t, 1), piece(in.k, t, 1), piece(in.v, t, 1),
                                            piece(in.beta, t, 1), piece(in.g, t, 1), piece(in.lam, t, 1), state,
                                            position, 0.7);
        CHECK(max_rel_err(r.o, ref.o.narrow(1, t, 1)) <= 1e-12);
        state = r.final_state;
        position = position + 1;
      }
      CHECK(max_rel_err(state, ref.final_state) <= 1e-12);
    }
  }
}

TEST_CASE("log_linear_gdn: without a final state the padded last chunk gives the same outputs and gradients",
          "[log_linear_gdn]") {
  for (int64_t T : {7, 63, 100}) {
    auto in = make_inputs(1, T, 2, 8, 6, log_linear_num_levels(T), true, false, 900 + T);
    auto ref = log_linear_gdn_recurrent(in.q, in.k, in.v, in.beta, in.g, in.lam, {}, 0, 0.7).o;
    for (int64_t C : {4, 16, 64}) {
      CAPTURE(T, C);
      auto r = log_linear_gdn_chunk(in.q, in.k, in.v, in.beta, in.g, in.lam, {}, 0, 0.7, C, false);
      CHECK_FALSE(r.final_state.defined());
      CHECK(max_rel_err(r.o, ref) <= 1e-10);
      torch::manual_seed(5);
      auto w = torch::randn(ref.sizes(), ref.options());
      auto g_ref = torch::autograd::grad({(ref * w).sum()}, in.leaves(), {}, true);
      auto g_got = torch::autograd::grad({(r.o * w).sum()}, in.leaves());
      for (size_t i = 0; i < g_ref.size(); ++i) {
        CAPTURE(i);
        CHECK(max_rel_err(g_got[i], g_ref[i], 1e-6) <= 1e-8);
      }
    }
  }
}

TEST_CASE("log_linear_gdn: the recurrence equals the level-weighted quadratic form", "[log_linear_gdn]") {
  for (bool delta : {true, false}) {
    for (int64_t start : {0, 5}) {
      for (int64_t NL : {int64_t{6}, int64_t{2}}) {
        CAPTURE(delta, start, NL);
        auto in = make_inputs(2, 21, 2, 4, 3, NL, delta, false, 11 + start + NL);
        auto expected = quadratic_form(in, start);
        CHECK(max_rel_err(log_linear_gdn_recurrent(in.q, in.k, in.v, in.beta, in.g, in.lam, {}, start, 0.7).o,
                          expected) <= 1e-12);
        CHECK(max_rel_err(log_linear_gdn_chunk(in.q, in.k, in.v, in.beta, in.g, in.lam, {}, start, 0.7, 4).o,
                          expected) <= 1e-12);
      }
    }
  }
}

TEST_CASE("log_linear_gdn with every level weight 1 is Gated DeltaNet", "[log_linear_gdn]") {
  auto in = make_inputs(2, 150, 2, 8, 6, 9, true, false, 21);
  torch::NoGradGuard ng;
  auto ones = torch::ones_like(in.lam);
  auto gdn = delta_rule_recurrent(in.q, in.k, in.v, in.beta, in.g, {}, 0.7);
  for (int64_t C : {0, 16}) {
    CAPTURE(C);
    auto r = C == 0 ? log_linear_gdn_recurrent(in.q, in.k, in.v, in.beta, in.g, ones, {}, 0, 0.7)
                    : log_linear_gdn_chunk(in.q, in.k, in.v, in.beta, in.g, ones, {}, 0, 0.7, C);
    CHECK(max_rel_err(r.o, gdn.o) <= 1e-11);
    CHECK(max_rel_err(r.final_state.sum(2), gdn.final_state) <= 1e-11);
  }
}

TEST_CASE("log_linear_gdn: one pass equals two parts with the state and position passed on", "[log_linear_gdn]") {
  auto in = make_inputs(1, 130, 2, 8, 8, 9, true, false, 31);
  torch::NoGradGuard ng;
  auto part = [](const torch::Tensor& t, int64_t s, int64_t n) { return t.narrow(1, s, n); };
  for (int64_t split : {37, 64}) {
    for (int64_t C : {0, 16}) {
      CAPTURE(split, C);
      auto call = [&](int64_t s, int64_t n, const torch::Tensor& h0) {
        return C == 0 ? log_linear_gdn_recurrent(part(in.q, s, n), part(in.k, s, n), part(in.v, s, n),
                                                 part(in.beta, s, n), part(in.g, s, n), part(in.lam, s, n), h0, s, 0.7)
                      : log_linear_gdn_chunk(part(in.q, s, n), part(in.k, s, n), part(in.v, s, n),
                                             part(in.beta, s, n), part(in.g, s, n), part(in.lam, s, n), h0, s, 0.7, C);
      };
      auto whole = call(0, 130, {});
      auto first = call(0, split, {});
      auto second = call(split, 130 - split, first.final_state);
      CHECK(max_rel_err(torch::cat({first.o, second.o}, 1), whole.o) <= 1e-12);
      CHECK(max_rel_err(second.final_state, whole.final_state) <= 1e-12);
    }
  }
}

TEST_CASE("log_linear_gdn: fp32 inputs compute in fp32 and agree with fp64", "[log_linear_gdn]") {
  auto in = make_inputs(1, 100, 2, 8, 8, 8, true, false, 41);
  auto f = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat32); };
  auto r32 = log_linear_gdn_chunk(f(in.q), f(in.k), f(in.v), f(in.beta), f(in.g), f(in.lam), {}, 0, 0.7, 16);
  auto r64 = log_linear_gdn_recurrent(in.q, in.k, in.v, in.beta, in.g, in.lam, {}, 0, 0.7);
  CHECK(r32.o.scalar_type() == torch::kFloat32);
  CHECK(max_rel_err(r32.o, r64.o) <= 1e-4);
  CHECK(max_rel_err(r32.final_state, r64.final_state) <= 1e-4);
}

TEST_CASE("log_linear_gdn: fp32 level scans are as close to fp64 as the chunk loop", "[log_linear_gdn][state_pass]") {
  // The GPU's route forms each level as a difference of group sums; with slow decay (g near 0: the upper levels hold
  // hundreds of tokens) that must not lose fp32 accuracy against the loop's per-level states.
  for (bool delta : {true, false}) {
    CAPTURE(delta);
    auto in = make_inputs(1, 1024, 2, 16, 16, log_linear_num_levels(1024), delta, false, 43);
    const torch::NoGradGuard no_grad;
    auto slow = (in.g.detach() * 0.01).to(torch::kFloat32);
    auto f = [](const torch::Tensor& t) { return t.defined() ? t.detach().to(torch::kFloat32) : t; };
    auto ref = log_linear_gdn_recurrent(in.q, in.k, in.v, in.beta, slow.to(torch::kFloat64), in.lam, {}, 0, 0.7);
    auto run32 = [&](bool scans) {
      const StatePassKernelHostScope route(scans);
      return log_linear_gdn_chunk(f(in.q), f(in.k), f(in.v), f(in.beta), slow, f(in.lam), {}, 0, 0.7, 16);
    };
    const auto loop = run32(false), scans = run32(true);
    const double loop_o = max_rel_err(loop.o, ref.o), scan_o = max_rel_err(scans.o, ref.o);
    const double loop_s = max_rel_err(loop.final_state, ref.final_state);
    const double scan_s = max_rel_err(scans.final_state, ref.final_state);
    INFO("o: loop " << loop_o << " scans " << scan_o << "; state: loop " << loop_s << " scans " << scan_s);
    CHECK(scan_o <= std::max(4 * loop_o, 1e-5));
    CHECK(scan_s <= std::max(4 * loop_s, 1e-5));
  }
}

TEST_CASE("log_linear_gdn: bad shapes and arguments are refused naming the tensor", "[log_linear_gdn]") {
  auto in = make_inputs(1, 5, 2, 8, 8, 4, true, true, 51);
  torch::NoGradGuard ng;
  CHECK_THROWS_WITH(log_linear_gdn_recurrent(in.q, in.k, in.v, in.beta, in.g, in.lam.select(-1, 0), {}, 0, 1.0),
                    Catch::Contains("level_weights"));
  CHECK_THROWS_WITH(log_linear_gdn_chunk(in.q, in.k, in.v, in.beta.unsqueeze(-1), in.g, in.lam, {}, 0, 1.0, 16),
                    Catch::Contains("beta"));
  CHECK_THROWS_WITH(log_linear_gdn_chunk(in.q, in.k, in.v, in.beta, in.g, in.lam, in.h0.narrow(2, 0, 2), 0, 1.0, 16),
                    Catch::Contains("initial_state"));
  CHECK_THROWS_WITH(log_linear_gdn_chunk(in.q, in.k, in.v, in.beta, in.g, in.lam, {}, 0, 1.0, 12),
                    Catch::Contains("chunk_size"));
  CHECK_THROWS_WITH(log_linear_gdn_chunk(in.q, in.k, in.v, in.beta, in.g, in.lam, {}, -1, 1.0, 16),
                    Catch::Contains("start"));
  CHECK(log_linear_num_levels(1) == 1);
  CHECK(log_linear_num_levels(2) == 2);
  CHECK(log_linear_num_levels(16) == 5);
  CHECK(log_linear_num_levels(17) == 6);
}

TEST_CASE("log_linear_gdn mixer: bad arguments are refused naming the argument", "[log_linear_gdn]") {
  using mnemo::test::make_mixer;
  CHECK_THROWS_WITH(make_mixer("log_linear_gdn", 16, 2, {{"chunk_size", 24}}), Catch::Contains("chunk_size"));
  CHECK_THROWS_WITH(make_mixer("log_linear_gdn", 16, 2, {{"num_levels", 0}}), Catch::Contains("num_levels"));
  CHECK_THROWS_WITH(make_mixer("log_linear_gdn", 16, 3, json::object()), Catch::Contains("divisible"));
  CHECK_THROWS_WITH(make_mixer("log_linear_gdn", 16, 2, {{"expand_v", 0.3}}), Catch::Contains("expand_v"));
}

TEST_CASE("log_linear_gdn mixer: more tokens than num_levels covers share the top level", "[log_linear_gdn]") {
  // num_levels 3 at T 40: levels 3..6 fold into level 2; decoding after a prefill still equals the full forward.
  auto m = mnemo::test::make_mixer("log_linear_gdn", 16, 2, {{"num_levels", 3}, {"chunk_size", 4}}, 7);
  m->to(torch::kFloat64);
  torch::manual_seed(3);
  auto x = torch::randn({1, 40, 16}, torch::kFloat64);
  torch::NoGradGuard ng;
  auto full = m->forward(x, nullptr);
  LayerState st;
  auto got = mnemo::test::prefill_decode(*m, x, 29, &st);
  CHECK(max_rel_err(got, full) <= 1e-10);
  CHECK(st.at("memory").size(2) == 3);
}
