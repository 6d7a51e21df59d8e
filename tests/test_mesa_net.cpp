// MesaNet kernels (docs/models.md#mesanet): the chunked form equals the token-by-token form in fp64 with the same
// number of CG steps (outputs, both final states, every input gradient), partial last chunks included; state passing
// across a split; the reduction to gated linear attention with one CG step; closeness to the exact regularised
// least-squares readout; bad inputs refused by name. The mixer's causality, decode == forward and gradients are in the
// mixer contract (tests/test_mixer_contract.cpp), the flash-linear-attention fixtures in
// tests/test_kernel_fixtures.cpp, the import of fla's own model in tests/test_fla_models.cpp; here its config mapping.
#include <catch2/catch.hpp>

#include "engine/io/fla_import.h"
#include "runtime/layers.h"
#include "runtime/mesa_net/mesa_net.h"
#include "runtime/retnet/retnet.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::max_rel_err;

namespace {

constexpr double kGradFloor = 1e-6;  // relative errors of gradients against a scale floored here

struct MesaInputs {
  torch::Tensor q, k, v, g, beta, lambda, h_kk, h_kv;  // h_kk / h_kv undefined without a state
  std::vector<torch::Tensor> leaves() const {
    std::vector<torch::Tensor> out = {q, k, v, g, beta, lambda};
    if (h_kk.defined()) out.push_back(h_kk);
    if (h_kv.defined()) out.push_back(h_kv);
    return out;
  }
};

// q, k l2-normalised normals, g = logsigmoid(N + 2), β = σ(N), λ = softplus(N) + 0.25; the initial H a positive
// semi-definite sum of outer products of unit keys (as any H the recurrence makes), the initial G normal.
MesaInputs make_mesa_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, bool with_state, uint64_t seed) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  MesaInputs in;
  in.q = l2norm(torch::randn({B, T, H, K}, o)).detach().requires_grad_();
  in.k = l2norm(torch::randn({B, T, H, K}, o)).detach().requires_grad_();
  in.v = torch::randn({B, T, H, V}, o).requires_grad_();
  in.g = torch::log_sigmoid(torch::randn({B, T, H}, o) + 2.0).detach().requires_grad_();
  in.beta = torch::sigmoid(torch::randn({B, T, H}, o)).detach().requires_grad_();
  in.lambda = (torch::softplus(torch::randn({H, K}, o)) + 0.25).detach().requires_grad_();
  if (with_state) {
    auto keys = l2norm(torch::randn({B, H, 3 * K, K}, o));
    in.h_kk = torch::matmul(keys.transpose(-1, -2), keys).detach().requires_grad_();
    in.h_kv = torch::randn({B, H, K, V}, o).requires_grad_();
  }
  return in;
}

struct MesaRun {
  torch::Tensor o, kk, kv;
  std::vector<torch::Tensor> grads;
};

// Outputs and the gradients of a fixed random linear functional of (o, H_T, G_T) w.r.t. every input; chunk 0 is the
// token-by-token form.
MesaRun mesa(const MesaInputs& in, int64_t chunk, int64_t steps,
             MesaNetGradient gradient = MesaNetGradient::kImplicit, double eps = 1e-5) {
  auto r = chunk == 0 ? mesa_net_recurrent(in.q, in.k, in.v, in.g, in.beta, in.lambda, in.h_kk, in.h_kv, steps,
                                           gradient, eps)
                      : mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda, in.h_kk, in.h_kv, steps, chunk,
                                       gradient, eps);
  torch::manual_seed(1234);
  auto wo = torch::randn(r.o.sizes(), r.o.options());
  auto wk = torch::randn(r.final_kk.sizes(), r.o.options()), wv = torch::randn(r.final_kv.sizes(), r.o.options());
  auto loss = (r.o * wo).sum() + (r.final_kk * wk).sum() + (r.final_kv * wv).sum();
  return {r.o.detach(), r.final_kk.detach(), r.final_kv.detach(), torch::autograd::grad({loss}, in.leaves())};
}

void check_same(const MesaRun& got, const MesaRun& ref) {
  CHECK(max_rel_err(got.o, ref.o) <= 1e-10);
  CHECK(max_rel_err(got.kk, ref.kk) <= 1e-10);
  CHECK(max_rel_err(got.kv, ref.kv) <= 1e-10);
  REQUIRE(got.grads.size() == ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    CAPTURE(i);
    CHECK(max_rel_err(got.grads[i], ref.grads[i], kGradFloor) <= 1e-8);
  }
}

torch::Tensor part(const torch::Tensor& t, int64_t start, int64_t len) { return t.narrow(1, start, len); }

}  // namespace

TEST_CASE("mesa_net: chunk form equals the recurrence in fp64 (outputs, final states, gradients)", "[mesa_net]") {
  // T 63 and 100 end in a partial chunk for every chunk size; C 7 leaves several chunks even at T 7.
  for (int64_t T : {1, 7, 63, 100}) {
    for (bool with_state : {false, true}) {
      auto in = make_mesa_inputs(2, T, 2, 8, 12, with_state, 70 + T);
      for (int64_t steps : {3, 12}) {
        auto ref = mesa(in, 0, steps);
        for (int64_t C : {16, 64, 7}) {
          CAPTURE(T, with_state, steps, C);
          check_same(mesa(in, C, steps), ref);
        }
      }
    }
  }
}

TEST_CASE("mesa_net: the unrolled gradient form also has chunk == recurrence in fp64", "[mesa_net]") {
  for (bool with_state : {false, true}) {
    auto in = make_mesa_inputs(2, 37, 2, 8, 12, with_state, 90);
    auto ref = mesa(in, 0, 5, MesaNetGradient::kUnrolled);
    for (int64_t C : {16, 7}) {
      CAPTURE(with_state, C);
      check_same(mesa(in, C, 5, MesaNetGradient::kUnrolled), ref);
    }
  }
}

TEST_CASE("mesa_net: implicit gradients equal autograd through a converged solve", "[mesa_net]") {
  // With a tight CG (eps 1e-30, 3·K steps for K = 8) the solve has converged to rounding, so the implicit gradient
  // and the gradient unrolled through the steps are the same derivative of the exact readout.
  for (bool with_state : {false, true}) {
    auto in = make_mesa_inputs(2, 45, 2, 8, 12, with_state, 91);
    for (int64_t C : {0, 16}) {
      CAPTURE(with_state, C);
      auto unrolled = mesa(in, C, 24, MesaNetGradient::kUnrolled, 1e-30);
      auto implicit = mesa(in, C, 24, MesaNetGradient::kImplicit, 1e-30);
      CHECK(max_rel_err(implicit.o, unrolled.o) <= 1e-12);
      REQUIRE(implicit.grads.size() == unrolled.grads.size());
      for (size_t i = 0; i < unrolled.grads.size(); ++i) {
        auto got = implicit.grads[i], want = unrolled.grads[i];
        if (i == 6) {  // H_0: CG assumes a symmetric operator, so only H_0's symmetric perturbations are comparable
          got = (got + got.transpose(-1, -2)) / 2;
          want = (want + want.transpose(-1, -2)) / 2;
        }
        CAPTURE(i, max_rel_err(got, want, kGradFloor));
        CHECK(max_rel_err(got, want, kGradFloor) <= 1e-8);
      }
    }
  }
}

TEST_CASE("mesa_net: at the default 30 CG steps the implicit and the unrolled gradients differ little", "[mesa_net]") {
  // Head size 32 as in `mnemo bench`'s default model; the layer's 1e-5 in CG's denominators. The measured largest
  // relative difference over all inputs' gradients (docs/models.md#mesanet) must stay small.
  auto in = make_mesa_inputs(1, 128, 2, 32, 32, false, 92);
  double worst = 0;
  for (int64_t C : {0, 32}) {
    auto unrolled = mesa(in, C, 30, MesaNetGradient::kUnrolled);
    auto implicit = mesa(in, C, 30, MesaNetGradient::kImplicit);
    CHECK(max_rel_err(implicit.o, unrolled.o) <= 1e-12);
    for (size_t i = 0; i < unrolled.grads.size(); ++i)
      worst = std::max(worst, max_rel_err(implicit.grads[i], unrolled.grads[i], kGradFloor));
  }
  CAPTURE(worst);
  CHECK(worst <= 2e-2);
  WARN("mesa_net implicit vs unrolled gradient, 30 CG steps: largest relative difference " << worst);
}

TEST_CASE("mesa_net: the implicit-gradient node is freed with its outputs (no reference cycle)", "[mesa_net]") {
  // The node keeps the form for its backward. A form that also kept its output H_T tied that output's graph to
  // itself: every training step's graph stayed alive (about 84 MB a step for a d_model-128 LM on the CPU; measured
  // with `mnemo bench --model mesa_net --d-model 128 --n-heads 4 --seq-lens 256 --batch 16 --mode fwdbwd` at 3 and
  // 12 repeats: 0.70 and 1.45 GB peak before, 0.50 and 0.50 after).
  for (int64_t chunk : {0, 4}) {
    CAPTURE(chunk);
    std::weak_ptr<torch::autograd::Node> node;
    {
      auto in = make_mesa_inputs(1, 9, 2, 4, 3, true, 41);
      auto r = chunk == 0 ? mesa_net_recurrent(in.q, in.k, in.v, in.g, in.beta, in.lambda, in.h_kk, in.h_kv, 5)
                          : mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda, in.h_kk, in.h_kv, 5, chunk);
      node = r.final_kk.grad_fn();
      REQUIRE(node.lock() != nullptr);
      (r.o.sum() + r.final_kk.sum() + r.final_kv.sum()).backward();
    }
    CHECK(node.expired());
  }
}

TEST_CASE("mesa_net: a second derivative of the implicit gradient is refused by name", "[mesa_net]") {
  auto in = make_mesa_inputs(1, 9, 2, 8, 8, false, 93);
  auto loss = mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda, {}, {}, 4, 4).o.square().sum();
  CHECK_THROWS_WITH(torch::autograd::grad({loss}, {in.v}, {}, /*retain_graph=*/true, /*create_graph=*/true),
                    Catch::Contains("kUnrolled"));
}

TEST_CASE("mesa_net: one pass equals two halves with both states passed on", "[mesa_net]") {
  auto in = make_mesa_inputs(1, 50, 2, 8, 8, true, 81);
  for (int64_t C : {0, 16}) {
    CAPTURE(C);
    auto run = [&](int64_t start, int64_t len, const torch::Tensor& kk, const torch::Tensor& kv) {
      return C == 0 ? mesa_net_recurrent(part(in.q, start, len), part(in.k, start, len), part(in.v, start, len),
                                         part(in.g, start, len), part(in.beta, start, len), in.lambda, kk, kv, 10)
                    : mesa_net_chunk(part(in.q, start, len), part(in.k, start, len), part(in.v, start, len),
                                     part(in.g, start, len), part(in.beta, start, len), in.lambda, kk, kv, 10, C);
    };
    auto whole = run(0, 50, in.h_kk, in.h_kv);
    auto first = run(0, 21, in.h_kk, in.h_kv);
    auto second = run(21, 29, first.final_kk, first.final_kv);
    CHECK(max_rel_err(torch::cat({first.o, second.o}, 1), whole.o) <= 1e-12);
    CHECK(max_rel_err(second.final_kk, whole.final_kk) <= 1e-12);
    CHECK(max_rel_err(second.final_kv, whole.final_kv) <= 1e-12);
  }
}

TEST_CASE("mesa_net with one CG step is gated linear attention with a per-token scale", "[mesa_net]") {
  // From x = 0 one step gives x_t = α_t q_t, α_t = q_t·q_t / (q_t (H_t + Diag(λ)) q_tᵀ + 1e-5), so
  // o_t = α_t q_t G_t: simple GLA with key β k and value v, scaled per token.
  auto in = make_mesa_inputs(2, 30, 2, 8, 12, true, 82);
  auto kb = in.k * in.beta.unsqueeze(-1);
  auto qG = simple_gla_recurrent(in.q, kb, in.v, in.g, 1.0, in.h_kv).o;
  auto qH = simple_gla_recurrent(in.q, kb, in.k, in.g, 1.0, in.h_kk).o;
  auto qAq = (qH * in.q).sum(-1, true) + (in.lambda * in.q * in.q).sum(-1, true);
  auto expected = (in.q * in.q).sum(-1, true) / (qAq + 1e-5) * qG;
  for (int64_t C : {0, 16}) {
    CAPTURE(C);
    auto r = C == 0 ? mesa_net_recurrent(in.q, in.k, in.v, in.g, in.beta, in.lambda, in.h_kk, in.h_kv, 1)
                    : mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda, in.h_kk, in.h_kv, 1, C);
    CHECK(max_rel_err(r.o, expected) <= 1e-12);
  }
}

TEST_CASE("mesa_net: more CG steps approach the exact regularised least-squares readout", "[mesa_net]") {
  // o*_t = q_t (H_t + Diag(λ))^{-1} G_t. The 1e-5 in CG's denominators stops progress once the residual's squared
  // norm nears 1e-5, so the readout is close, not exact; the error must shrink from 1 step to K and stay small.
  const int64_t B = 1, T = 40, H = 2, K = 8, V = 8;
  auto in = make_mesa_inputs(B, T, H, K, V, false, 83);
  torch::NoGradGuard no_grad;
  auto decay = in.g.exp();
  auto Hk = torch::zeros({B, H, K, K}, in.q.options()), Gv = torch::zeros({B, H, K, V}, in.q.options());
  std::vector<torch::Tensor> exact;
  for (int64_t t = 0; t < T; ++t) {
    auto gamma = decay.select(1, t).unsqueeze(-1).unsqueeze(-1);
    auto kb = (in.k.select(1, t) * in.beta.select(1, t).unsqueeze(-1)).unsqueeze(-1);
    Hk = gamma * Hk + kb * in.k.select(1, t).unsqueeze(-2);
    Gv = gamma * Gv + kb * in.v.select(1, t).unsqueeze(-2);
    auto x = torch::linalg_solve(Hk + torch::diag_embed(in.lambda), in.q.select(1, t).unsqueeze(-1), true);
    exact.push_back(torch::matmul(x.transpose(-1, -2), Gv).squeeze(-2));
  }
  auto o_exact = torch::stack(exact, 1);
  const double err1 = max_rel_err(mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda, {}, {}, 1, 16).o, o_exact);
  const double errK = max_rel_err(mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda, {}, {}, K, 16).o, o_exact);
  const double err30 =
      max_rel_err(mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda, {}, {}, 30, 16).o, o_exact);
  CAPTURE(err1, errK, err30);
  CHECK(errK < err1 / 10);
  CHECK(err30 <= errK);
  CHECK(err30 < 1e-2);
}

TEST_CASE("mesa_net: fp32 inputs compute in fp32 and agree with fp64", "[mesa_net]") {
  auto in = make_mesa_inputs(1, 37, 2, 8, 8, true, 84);
  auto f = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat32); };
  auto r32 = mesa_net_chunk(f(in.q), f(in.k), f(in.v), f(in.g), f(in.beta), f(in.lambda), f(in.h_kk), f(in.h_kv),
                            30, 16);
  auto r64 = mesa_net_recurrent(in.q, in.k, in.v, in.g, in.beta, in.lambda, in.h_kk, in.h_kv, 30);
  CHECK(r32.o.scalar_type() == torch::kFloat32);
  CHECK(r32.final_kk.scalar_type() == torch::kFloat32);
  CHECK(max_rel_err(r32.o, r64.o) <= 1e-4);
  CHECK(max_rel_err(r32.final_kv, r64.final_kv) <= 1e-5);
}

TEST_CASE("mesa_net: bad shapes and arguments are refused naming the tensor", "[mesa_net]") {
  auto in = make_mesa_inputs(1, 5, 2, 8, 8, true, 85);
  auto per_channel_g = in.g.detach().unsqueeze(-1).expand({1, 5, 2, 8});
  CHECK_THROWS_WITH(mesa_net_recurrent(in.q, in.k, in.v, per_channel_g, in.beta, in.lambda, {}, {}, 4),
                    Catch::Contains("'g' must have shape"));
  CHECK_THROWS_WITH(mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda.select(0, 0), {}, {}, 4, 16),
                    Catch::Contains("lambda"));
  CHECK_THROWS_WITH(mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda, in.h_kv.narrow(-1, 0, 4), {}, 4, 16),
                    Catch::Contains("h_kk"));
  CHECK_THROWS_WITH(mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda, {}, {}, 0, 16),
                    Catch::Contains("cg_steps"));
  CHECK_THROWS_WITH(mesa_net_chunk(in.q, in.k, in.v, in.g, in.beta, in.lambda, {}, {}, 4, 0),
                    Catch::Contains("chunk_size"));
}

TEST_CASE("mesa_net: fla configs map to the mixer's keys, and another norm eps is refused", "[mesa_net]") {
  json config = {{"model_type", "mesa_net"}, {"hidden_size", 32}, {"num_hidden_layers", 2}, {"vocab_size", 64},
                 {"num_heads", 2},           {"head_dim", 24},    {"max_cg_step_training", 12},
                 {"use_output_gate", true},  {"lambda_lower_bound", 0.5}};
  const FlaModel m = fla_config_to_mnemo(config, "config.json");
  CHECK(m.family == "mesa_net");
  CHECK(m.model_keys.at("cg_steps") == 12);
  CHECK(m.model_keys.at("num_heads") == 2);
  CHECK(m.model_keys.at("head_dim") == 24);
  CHECK(m.model_keys.at("use_output_gate") == true);
  CHECK(m.model_keys.at("lambda_lower_bound") == 0.5);
  config["norm_eps"] = 1e-5;
  CHECK_THROWS_WITH(fla_config_to_mnemo(config, "config.json"), Catch::Contains("norm_eps"));
}
