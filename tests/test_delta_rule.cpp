// DeltaNet / Gated DeltaNet kernels and mixers (docs/models.md#deltanet, docs/models.md#gated-deltanet, docs/models.md#verification):
// chunk == recurrent in fp64 (outputs, final state, all gradients), GDN with g = 0 == DeltaNet,
// state passing across splits, fp32 fixture parity, mixer prefill + decode == full forward.
#include <catch2/catch.hpp>

#include "runtime/delta_rule/delta_rule.h"
#include "runtime/layers.h"
#include "runtime/kernels/chunking.h"
#include "runtime/ops/fixture.h"
#include "runtime/registry.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::build_mixer;
using mnemo::test::max_rel_err;

namespace {

struct DeltaInputs {
  torch::Tensor q, k, v, beta, g, h0;  // g / h0 undefined when not used
};

// README distributions: q, k l2-normalised normals, beta = σ(N), g = logsigmoid(N + 2).
DeltaInputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, bool gated, bool with_state,
                        uint64_t seed) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  DeltaInputs in;
  in.q = l2norm(torch::randn({B, T, H, K}, o)).detach().requires_grad_();
  in.k = l2norm(torch::randn({B, T, H, K}, o)).detach().requires_grad_();
  in.v = torch::randn({B, T, H, V}, o).requires_grad_();
  in.beta = torch::sigmoid(torch::randn({B, T, H}, o)).detach().requires_grad_();
  if (gated) in.g = torch::log_sigmoid(torch::randn({B, T, H}, o) + 2.0).detach().requires_grad_();
  if (with_state) in.h0 = torch::randn({B, H, K, V}, o).requires_grad_();
  return in;
}

std::vector<torch::Tensor> leaves(const DeltaInputs& in) {
  std::vector<torch::Tensor> out = {in.q, in.k, in.v, in.beta};
  if (in.g.defined()) out.push_back(in.g);
  if (in.h0.defined()) out.push_back(in.h0);
  return out;
}

struct FormResult {
  torch::Tensor o, state;
  std::vector<torch::Tensor> grads;
};

// Forward with the chosen form (chunk_size 0 = recurrent) and gradients of a fixed random
// linear functional of (o, final state) w.r.t. every input.
FormResult run_with_grads(const DeltaInputs& in, int64_t chunk_size, double scale) {
  auto r = chunk_size == 0 ? delta_rule_recurrent(in.q, in.k, in.v, in.beta, in.g, in.h0, scale)
                           : delta_rule_chunk(in.q, in.k, in.v, in.beta, in.g, in.h0, scale, chunk_size);
  torch::manual_seed(1234);
  auto wo = torch::randn(r.o.sizes(), r.o.options()), ws = torch::randn(r.final_state.sizes(), r.o.options());
  auto loss = (r.o * wo).sum() + (r.final_state * ws).sum();
  auto grads = torch::autograd::grad({loss}, leaves(in));
  return {r.o.detach(), r.final_state.detach(), grads};
}

const char* grad_names[] = {"q", "k", "v", "beta", "g-or-h0", "h0"};

// Gradient errors are relative to the reference's scale floored at 1e-6: a gradient that is exactly zero in one
// form (g at T = 1 without a state) may be a rounding residual (~1e-16) in the other.
constexpr double kGradFloor = 1e-6;

}  // namespace

TEST_CASE("delta rule: chunk form equals recurrent form in fp64 (outputs, final state, gradients)",
          "[linear2]") {
  const int64_t B = 2, H = 2, K = 8, V = 12;
  for (bool gated : {false, true}) {
    for (int64_t T : {1, 7, 63, 100}) {
      for (bool with_state : {false, true}) {
        auto in = make_inputs(B, T, H, K, V, gated, with_state, 10 + T);
        auto ref = run_with_grads(in, 0, 0.3);
        for (int64_t C : {1, 16, 64}) {
          if (C == 1 && T > 7) continue;  // chunk size 1 is the slowest form; T = 7 covers it
          CAPTURE(gated, T, with_state, C);
          auto got = run_with_grads(in, C, 0.3);
          CHECK(max_rel_err(got.o, ref.o) <= 1e-10);
          CHECK(max_rel_err(got.state, ref.state) <= 1e-10);
          REQUIRE(got.grads.size() == ref.grads.size());
          for (size_t i = 0; i < ref.grads.size(); ++i) {
            CAPTURE(grad_names[i]);
            CHECK(max_rel_err(got.grads[i], ref.grads[i], kGradFloor) <= 1e-8);
          }
        }
      }
    }
  }
}

TEST_CASE("gated delta rule: the masked-difference form (decay span past the factorisation limit) == recurrent",
          "[linear2]") {
  // g about -6 per step: a 64-token chunk spans ~384 > 300, fp64's limit for the factorised form.
  auto in = make_inputs(2, 100, 2, 8, 12, true, true, 21);
  in.g = (in.g.detach() * 0.1 - 6.0).requires_grad_();
  REQUIRE_FALSE(decay_factorisable(torch::cumsum(to_chunks(in.g.detach(), 64), -1)));
  auto ref = run_with_grads(in, 0, 0.3), got = run_with_grads(in, 64, 0.3);
  CHECK(max_rel_err(got.o, ref.o) <= 1e-10);
  CHECK(max_rel_err(got.state, ref.state) <= 1e-10);
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    CAPTURE(grad_names[i]);
    CHECK(max_rel_err(got.grads[i], ref.grads[i], kGradFloor) <= 1e-8);
  }
}

TEST_CASE("delta rule: one chunk's state step equals the recurrence's final state in fp64, with gradients",
          "[linear2][delta_rule]") {
  // Head-major inputs of one chunk; decays of about -6 per step for the second case (past the factorisation limit).
  for (int64_t n : {1, 5, 16}) {
    for (double decay_shift : {0.0, -6.0}) {
      CAPTURE(n, decay_shift);
      auto in = make_inputs(2, n, 3, 8, 10, true, true, 40 + n);
      in.g = (in.g.detach() + decay_shift).requires_grad_();
      const std::vector<torch::Tensor> inputs = {in.k, in.v, in.beta, in.g, in.h0};
      torch::manual_seed(99);
      const auto w = torch::randn({2, 3, 8, 10}, torch::kFloat64);
      const auto ref = delta_rule_recurrent(in.k, in.k, in.v, in.beta, in.g, in.h0, 1.0).final_state;
      const auto got = delta_rule_chunk_step(in.h0, in.k.transpose(1, 2), in.v.transpose(1, 2),
                                             in.beta.transpose(1, 2), in.g.transpose(1, 2));
      CHECK(max_rel_err(got, ref) <= 1e-11);
      const auto ref_grads = torch::autograd::grad({(ref * w).sum()}, inputs);
      const auto got_grads = torch::autograd::grad({(got * w).sum()}, inputs);
      for (size_t i = 0; i < inputs.size(); ++i) {
        CAPTURE(i);
        CHECK(max_rel_err(got_grads[i], ref_grads[i], kGradFloor) <= 1e-9);
      }
    }
  }
}

TEST_CASE("gated delta rule with g = 0 equals the delta rule", "[linear2]") {
  auto in = make_inputs(2, 45, 2, 8, 8, false, true, 7);
  auto zero_g = torch::zeros({2, 45, 2}, torch::kFloat64);
  for (int64_t C : {0, 16}) {
    CAPTURE(C);
    auto plain = C == 0 ? delta_rule_recurrent(in.q, in.k, in.v, in.beta, {}, in.h0, 0.35)
                        : delta_rule_chunk(in.q, in.k, in.v, in.beta, {}, in.h0, 0.35, C);
    auto gated = C == 0 ? delta_rule_recurrent(in.q, in.k, in.v, in.beta, zero_g, in.h0, 0.35)
                        : delta_rule_chunk(in.q, in.k, in.v, in.beta, zero_g, in.h0, 0.35, C);
    CHECK(max_rel_err(gated.o, plain.o) <= 1e-13);
    CHECK(max_rel_err(gated.final_state, plain.final_state) <= 1e-13);
  }
}

TEST_CASE("delta rule: two passes with the state carried equal one pass", "[linear2]") {
  torch::NoGradGuard no_grad;
  const int64_t T = 100;
  for (bool gated : {false, true}) {
    auto in = make_inputs(2, T, 2, 8, 8, gated, true, 21);
    auto full = delta_rule_chunk(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.25, 16);
    for (int64_t split : {1, 37, 64}) {
      for (int64_t C : {0, 16}) {  // 0 = recurrent form
        CAPTURE(gated, split, C);
        auto part = [&](int64_t from, int64_t len, const torch::Tensor& h0) {
          auto s = [&](const torch::Tensor& t) { return t.defined() ? t.narrow(1, from, len) : t; };
          return C == 0 ? delta_rule_recurrent(s(in.q), s(in.k), s(in.v), s(in.beta), s(in.g), h0, 0.25)
                        : delta_rule_chunk(s(in.q), s(in.k), s(in.v), s(in.beta), s(in.g), h0, 0.25, C);
        };
        auto first = part(0, split, in.h0);
        auto second = part(split, T - split, first.final_state);
        CHECK(max_rel_err(torch::cat({first.o, second.o}, 1), full.o) <= 1e-10);
        CHECK(max_rel_err(second.final_state, full.final_state) <= 1e-10);
      }
    }
  }
}

TEST_CASE("delta rule kernels: fp32 compute for fp32 inputs, shape errors name the tensor", "[linear2]") {
  torch::NoGradGuard no_grad;
  auto in = make_inputs(1, 20, 2, 8, 8, true, false, 3);
  auto q = in.q.to(torch::kFloat32), k = in.k.to(torch::kFloat32), v = in.v.to(torch::kFloat32);
  auto beta = in.beta.to(torch::kFloat32), g = in.g.to(torch::kFloat32);
  auto r32 = delta_rule_chunk(q, k, v, beta, g, {}, 0.3, 8);
  CHECK(r32.o.scalar_type() == torch::kFloat32);
  CHECK(r32.final_state.scalar_type() == torch::kFloat32);
  auto r64 = delta_rule_recurrent(in.q, in.k, in.v, in.beta, in.g, {}, 0.3);
  CHECK(max_rel_err(r32.o.to(torch::kFloat64), r64.o) <= 1e-5);
  // bf16 activations keep an fp32 state (docs/models.md#conventions) and return o in bf16.
  auto rb = delta_rule_recurrent(q, k, v.to(torch::kBFloat16), beta, g, {}, 0.3);
  CHECK(rb.o.scalar_type() == torch::kBFloat16);
  CHECK(rb.final_state.scalar_type() == torch::kFloat32);

  CHECK_THROWS_WITH(delta_rule_chunk(q, k, v, beta.narrow(1, 0, 5), g, {}, 0.3, 8),
                    Catch::Contains("beta must be [B, T, H]"));
  CHECK_THROWS_WITH(delta_rule_recurrent(q, k.narrow(3, 0, 4), v, beta, g, {}, 0.3),
                    Catch::Contains("k must have q's shape"));
  CHECK_THROWS_WITH(delta_rule_chunk(q, k, v, beta, g, torch::zeros({1, 2, 8, 9}), 0.3, 8),
                    Catch::Contains("initial_state must be [B, H, K, V]"));
  CHECK_THROWS_AS(delta_rule_chunk(q, k, v, beta, g, {}, 0.3, 0), Error);
}

TEST_CASE("delta rule ops pass their fixtures in float32 with the float32 tolerances", "[linear2]") {
  auto& registry = KernelOpRegistry::instance();
  int64_t checked = 0;
  for (const auto& file : list_fixture_files(fixtures_dir())) {
    Fixture f = load_fixture(file);
    if (f.op != "delta_rule" && f.op != "gated_delta_rule") continue;
    for (const auto& check : check_fixture(f, registry.at(f.op), {16, 64}, "float32")) {
      std::string errors;
      for (const auto& o : check.outputs)
        errors += o.name + ": max_abs " + std::to_string(o.max_abs_err) + " atol " + std::to_string(o.atol) + "; ";
      CAPTURE(file, check.label(), check.error, errors);
      CHECK(check.pass());
      ++checked;
    }
  }
  CHECK(checked == 6 * 3);  // 3 cases × 2 ops × (recurrent + 2 chunk sizes)
}

TEST_CASE("deltanet and gated_deltanet mixers: prefill + decode equals the full forward (fp64)", "[linear2]") {
  for (const std::string family : {"deltanet", "gated_deltanet"}) {
    for (bool output_gate : {true, false}) {
      CAPTURE(family, output_gate);
      torch::manual_seed(5);
      auto mixer = build_mixer(family, 32, 2, {{"chunk_size", 8}, {"output_gate", output_gate}});
      mixer->to(torch::kFloat64);
      auto x = torch::randn({2, 21, 32}, torch::kFloat64);
      torch::NoGradGuard no_grad;
      auto full = mixer->forward(x, nullptr);
      REQUIRE(full.sizes() == x.sizes());

      LayerState state;
      std::vector<torch::Tensor> pieces = {mixer->forward(x.narrow(1, 0, 9), &state)};
      REQUIRE(state.has("memory"));
      for (int64_t t = 9; t < 21; ++t) pieces.push_back(mixer->forward(x.narrow(1, t, 1), &state));
      CHECK(max_rel_err(torch::cat(pieces, 1), full) <= 1e-10);

      // The recurrent form is the same function.
      auto recurrent = build_mixer(family, 32, 2, {{"form", "recurrent"}, {"output_gate", output_gate}});
      recurrent->to(torch::kFloat64);
      auto src = mixer->named_parameters(), dst = recurrent->named_parameters();
      for (const auto& p : src) dst[p.key()].copy_(p.value());
      CHECK(max_rel_err(recurrent->forward(x, nullptr), full) <= 1e-10);
    }
  }
}

TEST_CASE("gated_deltanet mixer: gradients reach every parameter, head layout and args are checked",
          "[linear2]") {
  torch::manual_seed(9);
  auto mixer = build_mixer("gated_deltanet", 32, 4, {{"chunk_size", 4}});
  auto x = torch::randn({2, 10, 32});
  mixer->forward(x, nullptr).pow(2).sum().backward();
  for (const auto& p : mixer->named_parameters()) {
    CAPTURE(p.key());
    REQUIRE(p.value().grad().defined());
    CHECK(torch::isfinite(p.value().grad()).all().item<bool>());
  }
  auto params = mixer->named_parameters();
  CHECK(params["q_proj.proj.weight"].sizes() == torch::IntArrayRef({32, 32}));  // 4 heads × d_k 8
  CHECK(params["v_proj.proj.weight"].sizes() == torch::IntArrayRef({64, 32}));  // expand_v 2
  CHECK(params["A_log"].sizes() == torch::IntArrayRef({4}));
  CHECK((params["A_log"].exp() <= 16.0).all().item<bool>());

  // d_model >= 1024: heads of d_k = 256, H = floor(0.75 d / 256) (docs/models.md#gated-deltanet).
  auto big = build_mixer("gated_deltanet", 1024, 16, json::object());
  CHECK(big->named_parameters()["q_proj.proj.weight"].sizes() == torch::IntArrayRef({768, 1024}));
  CHECK(big->named_parameters()["v_proj.proj.weight"].sizes() == torch::IntArrayRef({1536, 1024}));

  CHECK_THROWS_WITH(build_mixer("deltanet", 32, 2, {{"form", "parallel"}}), Catch::Contains("form"));
  CHECK_THROWS_WITH(build_mixer("deltanet", 32, 2, {{"chunk_size", 0}}), Catch::Contains("chunk_size"));
  CHECK_THROWS_WITH(build_mixer("deltanet", 30, 4, json::object()), Catch::Contains("not divisible"));
}
