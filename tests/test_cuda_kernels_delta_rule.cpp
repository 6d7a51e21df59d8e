// The fused delta-rule chunk kernels (runtime/delta_rule/chunk_kernel.cuh) proven on the CPU: their block code run
// over the sequential host grid (delta_rule_chunk_fused on CPU tensors) against the eager chunk form and the token
// recurrence — outputs, final states and every gradient (q, k, v, β, g, initial state) through autograd on both
// sides — in fp64 (1e-10) and fp32 (the fp32 tolerances of test_delta_rule.cpp: 1e-5 of the fp64 truth for outputs),
// with and without g, T not a multiple of the chunk, K != V, several V tiles, packed sequences (cu_seqlens) against
// the reference run per sequence, bf16 element I/O (the forward on tensor cores: block_mma's host form), and the
// oracle fixtures.
//  [.cuda-kernels_delta_rule]  on a CUDA device: the CUDA kernels against the host run and the eager chunk form in
//                              fp32 and bf16 (CTest cuda.kernels_delta_rule, skipped without a GPU).
#include <cstdlib>
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/torch_compat.h"
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/kernels/op_helpers.h"
#include "runtime/layers.h"
#include "runtime/ops/fixture.h"
#include "runtime/kernels/kernel_counts.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;

// Helpers and test cases in a named namespace: unity builds compile this file with other test files.
namespace delta_rule_kernel_tests {

using mnemo::test::error_ratio;
using mnemo::test::max_rel_err;

struct Inputs {
  torch::Tensor q, k, v, beta, g, h0;  // g / h0 undefined when not used
};

// test_delta_rule.cpp's distributions: q, k l2-normalised normals, β = σ(N), g = logsigmoid(N + 2).
Inputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, bool gated, bool with_state, uint64_t seed,
                   int64_t state_count = -1) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kFloat64);
  Inputs in;
  in.q = l2norm(torch::randn({B, T, H, K}, o)).detach().requires_grad_();
  in.k = l2norm(torch::randn({B, T, H, K}, o)).detach().requires_grad_();
  in.v = torch::randn({B, T, H, V}, o).requires_grad_();
  in.beta = torch::sigmoid(torch::randn({B, T, H}, o)).detach().requires_grad_();
  if (gated) in.g = torch::log_sigmoid(torch::randn({B, T, H}, o) + 2.0).detach().requires_grad_();
  if (with_state) in.h0 = torch::randn({state_count < 0 ? B : state_count, H, K, V}, o).requires_grad_();
  return in;
}

// The same inputs as fresh leaves of dtype `dt`.
Inputs cast(const Inputs& in, torch::ScalarType dt) {
  auto leaf = [&](const torch::Tensor& t) { return t.defined() ? t.detach().to(dt).requires_grad_() : t; };
  return {leaf(in.q), leaf(in.k), leaf(in.v), leaf(in.beta), leaf(in.g), leaf(in.h0)};
}

std::vector<torch::Tensor> leaves(const Inputs& in) {
  std::vector<torch::Tensor> out = {in.q, in.k, in.v, in.beta};
  if (in.g.defined()) out.push_back(in.g);
  if (in.h0.defined()) out.push_back(in.h0);
  return out;
}

std::vector<std::string> leaf_names(const Inputs& in) {
  std::vector<std::string> out = {"dq", "dk", "dv", "dbeta"};
  if (in.g.defined()) out.push_back("dg");
  if (in.h0.defined()) out.push_back("dh0");
  return out;
}

struct Result {
  torch::Tensor o, state;
  std::vector<torch::Tensor> grads;
};

// Gradients of a fixed random linear functional of (o, final state) w.r.t. every input.
Result with_grads(const Inputs& in, const DeltaRuleResult& r) {
  torch::manual_seed(1234);
  auto wo = torch::randn(r.o.sizes(), torch::kFloat64).to(r.o.device(), r.o.scalar_type());
  auto ws = torch::randn(r.final_state.sizes(), torch::kFloat64).to(r.final_state.device(), r.final_state.scalar_type());
  auto loss = (r.o * wo).sum() + (r.final_state * ws).sum();
  return {r.o.detach(), r.final_state.detach(), torch::autograd::grad({loss}, leaves(in))};
}

enum class Form { fused, chunk, recurrent };

Result run(Form form, const Inputs& in, double scale, int64_t chunk, int64_t value_tile = 0) {
  switch (form) {
    case Form::fused:
      return with_grads(in, delta_rule_chunk_fused(in.q, in.k, in.v, in.beta, in.g, in.h0, scale, chunk, {}, value_tile));
    case Form::chunk: return with_grads(in, delta_rule_chunk(in.q, in.k, in.v, in.beta, in.g, in.h0, scale, chunk));
    case Form::recurrent: break;
  }
  return with_grads(in, delta_rule_recurrent(in.q, in.k, in.v, in.beta, in.g, in.h0, scale));
}

// Largest relative error over outputs, state and gradients (each relative to the reference's max, gradients floored
// at 1e-6 as in test_delta_rule.cpp); every part is checked against `tol` with its name captured.
double check_close(const Result& got, const Result& ref, const std::vector<std::string>& names, double tol,
                   double grad_tol) {
  double worst = 0;
  const double eo = max_rel_err(got.o, ref.o), es = max_rel_err(got.state, ref.state);
  CHECK(eo <= tol);
  CHECK(es <= tol);
  worst = std::max({worst, eo, es});
  REQUIRE(got.grads.size() == ref.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) {
    CAPTURE(names[i]);
    const double e = max_rel_err(got.grads[i], ref.grads[i], 1e-6);
    CHECK(e <= grad_tol);
    worst = std::max(worst, e);
  }
  return worst;
}

TEST_CASE("fused delta rule kernel (host grid) == chunk and recurrent forms in fp64: o, state, every gradient",
          "[cuda-kernel][delta_rule]") {
  double worst = 0;
  for (bool gated : {false, true}) {
    for (int64_t value_tile : {0, 8}) {  // one V tile; tiles of 8 + 4 columns
      // T = 37 with C = 16: two full chunks and a 5-row tail; K = 8 != V = 12.
      auto in = make_inputs(2, 37, 2, 8, 12, gated, true, 7 + gated);
      CAPTURE(gated, value_tile);
      auto fused = run(Form::fused, in, 0.4, 16, value_tile);
      worst = std::max(worst, check_close(fused, run(Form::chunk, in, 0.4, 16), leaf_names(in), 1e-10, 1e-10));
      worst = std::max(worst, check_close(fused, run(Form::recurrent, in, 0.4, 0), leaf_names(in), 1e-10, 1e-10));
    }
  }
  // No initial state, a chunk longer than T, and C = 1 (every row its own chunk).
  for (int64_t chunk : {1, 64}) {
    auto in = make_inputs(1, 19, 1, 16, 8, true, false, 21);
    CAPTURE(chunk);
    worst = std::max(worst, check_close(run(Form::fused, in, 0.25, chunk), run(Form::recurrent, in, 0.25, 0),
                                        leaf_names(in), 1e-10, 1e-10));
  }
  WARN("fp64 max relative error (o, state, gradients): " << worst);
}

TEST_CASE("fused delta rule kernel (host grid) in fp32: within the fp32 tolerance of the fp64 truth",
          "[cuda-kernel][delta_rule]") {
  double worst_o = 0, worst_grad = 0;
  for (bool gated : {false, true}) {
    auto in64 = make_inputs(2, 45, 2, 16, 24, gated, true, 11 + gated);
    auto in32 = cast(in64, torch::kFloat32);
    CAPTURE(gated);
    auto fused = run(Form::fused, in32, 0.25, 16, 16);
    auto truth = run(Form::recurrent, in64, 0.25, 0);
    CHECK(fused.o.scalar_type() == torch::kFloat32);
    CHECK(fused.state.scalar_type() == torch::kFloat32);
    const auto names = leaf_names(in32);
    // Outputs: test_delta_rule.cpp's fp32 bound (1e-5 of the fp64 result); gradients 1e-4 (a few more fp32 passes).
    check_close(fused, truth, names, 1e-5, 1e-4);
    worst_o = std::max({worst_o, max_rel_err(fused.o, truth.o), max_rel_err(fused.state, truth.state)});
    for (size_t i = 0; i < names.size(); ++i)
      worst_grad = std::max(worst_grad, max_rel_err(fused.grads[i], truth.grads[i], 1e-6));
    // And no further from the fp64 truth than the eager fp32 chunk form is (within a factor of 4).
    auto eager = run(Form::chunk, in32, 0.25, 16);
    CHECK(max_rel_err(fused.o, truth.o) <= 4 * max_rel_err(eager.o, truth.o) + 1e-7);
  }
  WARN("fp32 max relative error vs fp64 recurrent: o/state " << worst_o << ", gradients " << worst_grad);
}

TEST_CASE("fused delta rule kernel: packed sequences (cu_seqlens) == the reference run per sequence",
          "[cuda-kernel][delta_rule]") {
  // Sequences of 23, 57, 0 and 41 tokens packed into T = 121 (B = 1), each with its own initial state.
  const std::vector<int64_t> lengths = {23, 57, 0, 41};
  std::vector<int32_t> offsets = {0};
  for (auto n : lengths) offsets.push_back(offsets.back() + static_cast<int32_t>(n));
  const auto cu = torch::tensor(offsets, torch::kInt32);
  for (auto dt : {torch::kFloat64, torch::kFloat32}) {
    for (bool gated : {false, true}) {
      CAPTURE(dt, gated);
      auto in = cast(make_inputs(1, offsets.back(), 2, 8, 12, gated, true, 31, 4), dt);
      auto fused = with_grads(in, delta_rule_chunk_fused(in.q, in.k, in.v, in.beta, in.g, in.h0, 0.3, 16, cu, 8));
      // Reference: delta_rule_chunk on each sequence's slice of the same leaves.
      std::vector<torch::Tensor> outs, states;
      for (size_t s = 0; s < lengths.size(); ++s) {
        auto slice = [&](const torch::Tensor& t) {
          return t.defined() ? t.narrow(1, offsets[s], lengths[s]) : t;
        };
        auto r = delta_rule_chunk(slice(in.q), slice(in.k), slice(in.v), slice(in.beta), slice(in.g),
                                  in.h0.narrow(0, s, 1), 0.3, 16);
        outs.push_back(r.o);
        states.push_back(r.final_state);
      }
      auto ref = with_grads(in, {torch::cat(outs, 1), torch::cat(states, 0)});
      const double tol = dt == torch::kFloat64 ? 1e-10 : 1e-5, grad_tol = dt == torch::kFloat64 ? 1e-10 : 1e-4;
      const double worst = check_close(fused, ref, leaf_names(in), tol, grad_tol);
      WARN("cu_seqlens " << (dt == torch::kFloat64 ? "fp64" : "fp32") << (gated ? " gated" : "")
                         << ": max relative error " << worst);
    }
  }
}

TEST_CASE("fused delta rule kernel: bf16 inputs keep an fp32 state and return bf16 o", "[cuda-kernel][delta_rule]") {
  auto in64 = make_inputs(1, 40, 2, 16, 16, true, false, 41);
  auto in_bf = cast(in64, torch::kBFloat16);
  in_bf.beta = in64.beta.detach().to(torch::kFloat32).requires_grad_();
  in_bf.g = in64.g.detach().to(torch::kFloat32).requires_grad_();
  auto fused = run(Form::fused, in_bf, 0.25, 16);
  CHECK(fused.o.scalar_type() == torch::kBFloat16);
  CHECK(fused.state.scalar_type() == torch::kFloat32);
  CHECK(fused.grads[0].scalar_type() == torch::kBFloat16);
  // The truth on the bf16-rounded inputs. The forward's products take bf16 operands (the state, L⁻¹, R, U' and P
  // rounded where they enter a product, as flash-linear-attention's kernels), so each carries about 2^-9 of
  // relative rounding; the state itself is summed in fp32.
  auto rounded = cast(in_bf, torch::kFloat64);
  auto truth = run(Form::recurrent, rounded, 0.25, 0);
  CHECK(max_rel_err(fused.o, truth.o) <= 1e-2);
  CHECK(max_rel_err(fused.state, truth.state) <= 1e-2);
  for (size_t i = 0; i < fused.grads.size(); ++i) CHECK(max_rel_err(fused.grads[i], truth.grads[i], 1e-6) <= 2e-2);
}

TEST_CASE("fused delta rule kernel: bf16 on tensor cores with padded tiles, V tiles and packed sequences",
          "[cuda-kernel][delta_rule]") {
  // K = 40 and V tiles of 16 + 8 columns pad to the 16-wide tiles; two packed sequences of 37 and 70 rows in chunks
  // of 32 end in partial chunks; each sequence has its own initial state.
  const int64_t T = 107, H = 2, K = 40, V = 24;
  auto cu = torch::tensor(std::vector<int32_t>{0, 37, 107}, torch::kInt32);
  for (bool gated : {false, true}) {
    CAPTURE(gated);
    auto in64 = make_inputs(1, T, H, K, V, gated, true, 71 + gated, 2);
    auto in_bf = cast(in64, torch::kBFloat16);
    in_bf.beta = in64.beta.detach().to(torch::kFloat32).requires_grad_();
    if (gated) in_bf.g = in64.g.detach().to(torch::kFloat32).requires_grad_();
    in_bf.h0 = in64.h0.detach().to(torch::kFloat32).requires_grad_();
    auto fused = with_grads(in_bf, delta_rule_chunk_fused(in_bf.q, in_bf.k, in_bf.v, in_bf.beta, in_bf.g, in_bf.h0,
                                                          1.0 / std::sqrt(K), 32, cu, 16));
    // The truth: the same kernels in fp64 (the scalar stages, equal to the recurrence above) on the rounded inputs.
    // Every stage but the gradient stage runs on tensor cores here (forward, and the backward's local and state).
    auto rounded = cast(in_bf, torch::kFloat64);
    auto truth = with_grads(rounded, delta_rule_chunk_fused(rounded.q, rounded.k, rounded.v, rounded.beta, rounded.g,
                                                            rounded.h0, 1.0 / std::sqrt(K), 32, cu, 16));
    const double eo = error_ratio(fused.o, truth.o), es = error_ratio(fused.state, truth.state);
    CHECK(eo <= 5e-3);
    CHECK(es <= 5e-3);
    double worst_grad = 0;
    const auto names = leaf_names(in_bf);
    for (size_t i = 0; i < fused.grads.size(); ++i) {
      CAPTURE(names[i]);
      const double e = error_ratio(fused.grads[i], truth.grads[i]);
      CHECK(e <= 1e-2);
      worst_grad = std::max(worst_grad, e);
    }
    WARN("bf16 on tensor cores" << (gated ? " gated" : "") << ": error ratio o " << eo << ", state " << es
                                    << ", gradients ≤ " << worst_grad);
  }
}

TEST_CASE("fused delta rule kernel: bf16 on tensor cores at the production tile (C = 64, K = V = 64)",
          "[cuda-kernel][delta_rule]") {
  // Two K slabs in the gradient stage, one V tile of 64, a 2-row tail chunk.
  auto in64 = make_inputs(1, 130, 1, 64, 64, true, true, 83);
  auto in_bf = cast(in64, torch::kBFloat16);
  in_bf.beta = in64.beta.detach().to(torch::kFloat32).requires_grad_();
  in_bf.g = in64.g.detach().to(torch::kFloat32).requires_grad_();
  in_bf.h0 = in64.h0.detach().to(torch::kFloat32).requires_grad_();
  auto fused = run(Form::fused, in_bf, 0.125, 64);
  auto truth = run(Form::fused, cast(in_bf, torch::kFloat64), 0.125, 64);
  CHECK(error_ratio(fused.o, truth.o) <= 5e-3);
  CHECK(error_ratio(fused.state, truth.state) <= 5e-3);
  const auto names = leaf_names(in_bf);
  std::string ratios;
  for (size_t i = 0; i < fused.grads.size(); ++i) {
    CAPTURE(names[i]);
    const double e = error_ratio(fused.grads[i], truth.grads[i]);
    CHECK(e <= 1e-2);
    ratios += " " + names[i] + " " + std::to_string(e);
  }
  WARN("bf16 on tensor cores, C = K = V = 64: gradient error ratios" << ratios);
}

TEST_CASE("fused delta rule kernel: the oracle fixtures in fp64 and fp32", "[cuda-kernel][delta_rule]") {
  int64_t checked = 0;
  for (const auto& file : list_fixture_files(fixtures_dir())) {
    Fixture f = load_fixture(file);
    if (f.op != "delta_rule" && f.op != "gated_delta_rule") continue;
    const bool head_first = f.op == "delta_rule";  // [B, H, T, D] fixtures; the kernels take [B, T, H, D]
    auto layout = [&](const torch::Tensor& t) { return head_first ? t.transpose(1, 2) : t; };
    for (const std::string precision : {"float64", "float32"}) {
      const auto dt = precision == "float64" ? torch::kFloat64 : torch::kFloat32;
      auto in = [&](const std::string& name) {
        return f.inputs.count(name) ? f.inputs.at(name).to(dt) : torch::Tensor();
      };
      auto q = in("q");
      const double scale = kernel_op_args::scale(f.params, f.op, q.size(3));
      for (int64_t chunk : {16, 64}) {
        auto r = delta_rule_chunk_fused(layout(q), layout(in("k")), layout(in("v")), layout(in("beta")), in("g"),
                                        in("initial_state"), scale, chunk);
        const std::map<std::string, torch::Tensor> got = {{"o", layout(r.o)}, {"final_state", r.final_state}};
        for (const auto& [name, actual] : got) {
          if (!f.outputs.count(name)) continue;
          const auto [rtol, atol] = fixture_tolerance(f, name, precision);
          auto cmp = compare_output(name, actual.to(torch::kFloat64), f.outputs.at(name), rtol, atol);
          CAPTURE(file, precision, chunk, name, cmp.max_abs_err, cmp.problem);
          CHECK(cmp.pass);
        }
        ++checked;
      }
    }
  }
  CHECK(checked == 6 * 2 * 2);  // 3 cases × 2 ops × 2 precisions × 2 chunk sizes
}

TEST_CASE("fused delta rule kernel: MNEMO_DELTA_RULE_VALUE_TILE sets the V tile of calls that ask for none",
          "[cuda-kernel][delta_rule]") {
  struct EnvTile {  // set for the scope, unset after (also when a check throws)
    explicit EnvTile(const char* v) { ::setenv("MNEMO_DELTA_RULE_VALUE_TILE", v, 1); }
    ~EnvTile() { ::unsetenv("MNEMO_DELTA_RULE_VALUE_TILE"); }
  };
  auto in = make_inputs(1, 24, 2, 8, 12, true, true, 5);
  const auto one_tile = run(Form::fused, in, 0.3, 8);
  const auto explicit_tile = run(Form::fused, in, 0.3, 8, 4);
  {
    const EnvTile env("4");
    const auto from_env = run(Form::fused, in, 0.3, 8);
    CHECK(torch::equal(from_env.o, explicit_tile.o));
    CHECK(torch::equal(from_env.state, explicit_tile.state));
    for (size_t i = 0; i < from_env.grads.size(); ++i) CHECK(torch::equal(from_env.grads[i], explicit_tile.grads[i]));
    CHECK(torch::equal(run(Form::fused, in, 0.3, 8, 12).o, one_tile.o));  // an explicit tile wins
  }
  {
    const EnvTile env("0");
    CHECK(torch::equal(run(Form::fused, in, 0.3, 8).o, one_tile.o));
  }
  {
    const EnvTile env("wide");
    CHECK_THROWS_WITH(run(Form::fused, in, 0.3, 8), Catch::Contains("MNEMO_DELTA_RULE_VALUE_TILE") &&
                                                         Catch::Contains("'wide'"));
  }
}

TEST_CASE("deltanet, gated deltanet and gated deltaproduct layers on the fused kernels (host grid) == their recurrent "
          "form (fp64)",
          "[cuda-kernel][delta_rule]") {
  // The route a GPU takes (delta_rule_fused_route), over the host grid.
  const DeltaRuleKernelHostScope on_host;
  for (const std::string family : {"deltanet", "gated_deltanet", "gated_deltaproduct"}) {
    INFO(family);
    reset_kernel_pass_counts();
    test::require_chunk_equals_recurrent_on(torch::kCPU, family, 2, {{"chunk_size", 16}});
    CHECK(kernel_pass_counts().count("delta_rule forward (host grid, fp64 products)") == 1);
    CHECK(kernel_pass_counts().count("delta_rule backward (host grid, fp64 products)") == 1);
  }
}

TEST_CASE("fused kernel pass counts name the kernel, where it ran and its products' precision",
          "[cuda-kernel][delta_rule]") {
  reset_kernel_pass_counts();
  CHECK(describe_kernel_pass_counts().empty());
  auto in = make_inputs(1, 20, 1, 8, 8, true, false, 9);
  run(Form::fused, in, 0.3, 8);  // forward, then the backward's recompute and backward
  auto bf = cast(in, torch::kBFloat16);
  bf.beta = in.beta.detach().to(torch::kFloat32).requires_grad_();
  bf.g = in.g.detach().to(torch::kFloat32).requires_grad_();
  run(Form::fused, bf, 0.3, 8);
  const auto counts = kernel_pass_counts();
  for (const std::string products : {"fp64 products", "bf16 products"})
    for (const std::string pass : {"delta_rule forward", "delta_rule recompute", "delta_rule backward"}) {
      const std::string key = pass + " (host grid, " + products + ")";
      CAPTURE(key, describe_kernel_pass_counts());
      CHECK(counts.count(key) == 1);
      if (counts.count(key)) CHECK(counts.at(key) == 1);
    }
  CHECK(counts.size() == 6);
  CHECK_THAT(describe_kernel_pass_counts(), Catch::Contains("delta_rule forward (host grid, bf16 products) x1"));
  reset_kernel_pass_counts();
  CHECK(kernel_pass_counts().empty());
}

TEST_CASE("fused delta rule kernel: packed-batch arguments are checked", "[cuda-kernel][delta_rule]") {
  auto in = make_inputs(2, 10, 1, 4, 4, false, false, 3);
  auto cu = torch::tensor(std::vector<int32_t>{0, 4, 10}, torch::kInt32);
  CHECK_THROWS_WITH(delta_rule_chunk_fused(in.q, in.k, in.v, in.beta, {}, {}, 1.0, 4, cu),
                    Catch::Contains("cu_seqlens needs a packed batch (B = 1)"));
  auto one = make_inputs(1, 10, 1, 4, 4, false, false, 3);
  CHECK_THROWS_WITH(delta_rule_chunk_fused(one.q, one.k, one.v, one.beta, {}, {}, 1.0, 4,
                                           torch::tensor(std::vector<int32_t>{0, 4, 9}, torch::kInt32)),
                    Catch::Contains("cu_seqlens must run from 0 to T = 10"));
  CHECK_THROWS_WITH(delta_rule_chunk_fused(one.q, one.k, one.v, one.beta, {}, torch::zeros({1, 1, 4, 4}), 1.0, 4, cu),
                    Catch::Contains("initial_state must be [sequences, H, K, V] = [2, 1, 4, 4]"));
  CHECK_THROWS_WITH(delta_rule_chunk_fused(one.q, one.k, one.v, one.beta, {}, {}, 1.0, 0), Catch::Contains("chunk_size"));
}

TEST_CASE("cuda: the fused delta rule kernels == their host run and the eager chunk form (fp32, bf16)",
          "[.cuda-kernels_delta_rule]") {
  REQUIRE(torch::cuda::is_available());
  REQUIRE(delta_rule_fused_on_device(torch::zeros({1}, torch::Device(torch::kCUDA))));
  at::globalContext().setAllowTF32CuBLAS(false);
  const torch::Device cuda(torch::kCUDA);
  auto to_device = [&](const Inputs& in) {
    auto leaf = [&](const torch::Tensor& t) { return t.defined() ? t.detach().to(cuda).requires_grad_() : t; };
    return Inputs{leaf(in.q), leaf(in.k), leaf(in.v), leaf(in.beta), leaf(in.g), leaf(in.h0)};
  };
  for (bool gated : {false, true}) {
    // fp32, K = V = 64 with C = 64 (tiles in shared memory) and K = V = 128 (the backward's global workspace).
    for (int64_t dim : {64, 128}) {
      CAPTURE(gated, dim);
      auto host = cast(make_inputs(2, 200, 2, dim, dim, gated, true, 51 + gated), torch::kFloat32);
      auto dev = to_device(host);
      auto on_host = run(Form::fused, host, 1.0 / std::sqrt(dim), 64);
      auto on_device = run(Form::fused, dev, 1.0 / std::sqrt(dim), 64);
      auto eager = run(Form::chunk, dev, 1.0 / std::sqrt(dim), 64);
      auto to_cpu = [](Result r) {
        r.o = r.o.cpu(), r.state = r.state.cpu();
        for (auto& g : r.grads) g = g.cpu();
        return r;
      };
      check_close(to_cpu(on_device), on_host, leaf_names(host), 1e-5, 1e-4);
      check_close(on_device, eager, leaf_names(host), 1e-4, 1e-3);
    }
    // bf16 element I/O: device == host run (the same roundings; fp32 accumulation order may differ).
    auto host = cast(make_inputs(1, 130, 2, 64, 64, gated, false, 61), torch::kBFloat16);
    host.beta = host.beta.detach().to(torch::kFloat32).requires_grad_();
    if (gated) host.g = host.g.detach().to(torch::kFloat32).requires_grad_();
    auto dev = to_device(host);
    auto on_host = run(Form::fused, host, 0.125, 64);
    auto on_device = run(Form::fused, dev, 0.125, 64);
    // The forward's tensor-core products sum in another order than the host's; an fp32 value rounded to bf16
    // before the next product may then land one bf16 step apart.
    CHECK(max_rel_err(on_device.o.cpu(), on_host.o) <= 1e-2);
    CHECK(max_rel_err(on_device.state.cpu(), on_host.state) <= 2e-3);
    for (size_t i = 0; i < on_host.grads.size(); ++i)
      CHECK(max_rel_err(on_device.grads[i].cpu(), on_host.grads[i], 1e-6) <= 2e-2);
    // Under bf16 autocast fp32 q and k (the mixers' l2norm output there) run the bf16 tensor-core stages, as fla.
    {
      Inputs mixed = to_device(host);
      mixed.q = mixed.q.detach().to(torch::kFloat32).requires_grad_();
      mixed.k = mixed.k.detach().to(torch::kFloat32).requires_grad_();
      torch_compat::set_autocast(c10::DeviceType::CUDA, true, torch::kBFloat16);
      auto under_autocast = run(Form::fused, mixed, 0.125, 64);
      torch_compat::set_autocast(c10::DeviceType::CUDA, false, torch::kBFloat16);
      CHECK(torch::equal(under_autocast.o, on_device.o));
      CHECK(torch::equal(under_autocast.state, on_device.state));
    }
  }
}

TEST_CASE("cuda: the deltanet, gated deltanet, gated deltaproduct and mom mixers on the fused kernels == their "
          "recurrent form",
          "[.cuda-kernels_delta_rule]") {
  REQUIRE(torch::cuda::is_available());
  const torch::Device cuda(torch::kCUDA);
  for (const std::string family : {"deltanet", "gated_deltanet", "gated_deltaproduct", "mom"}) {
    INFO(family);
    reset_kernel_pass_counts();
    test::require_chunk_equals_recurrent_on(cuda, family, 2, {{"chunk_size", 16}});
    const auto counts = kernel_pass_counts();
    INFO(describe_kernel_pass_counts());
    CHECK(counts.count("delta_rule forward (cuda, fp64 products)") == 1);
    CHECK(counts.count("delta_rule backward (cuda, fp64 products)") == 1);
  }
}

}  // namespace delta_rule_kernel_tests
