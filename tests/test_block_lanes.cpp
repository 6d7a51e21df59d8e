// Data races between the threads of one phase, looked for on the CPU (runtime/kernels/host_grid.h HostLanesScope):
// every block-code kernel's host run with 8 lanes taking turns phase by phase in lane order, and again in reverse
// order, gives the same outputs and gradients (a value one lane writes and another reads or writes within a phase
// would differ between the two orders), and the same as its one-lane run. A deliberately racy block function is told
// apart, which shows the check can fail. Tags [cuda-kernel][lanes].
#include <catch2/catch.hpp>

#include <functional>

#include "runtime/deep_memory/fused_chunk.h"
#include "runtime/kernels/precision.h"
#include "runtime/delta_rule/delta_rule.h"
#include "runtime/gla/gla.h"
#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/fused_layers.h"
#include "runtime/kernels/host_grid.h"
#include "runtime/lattice/lattice.h"
#include "runtime/layers.h"
#include "runtime/mamba/selective_scan.h"
#include "runtime/miras/fused_segment.h"
#include "tests/test_util.h"

using namespace mnemo;

// Helpers in a named namespace: unity builds compile this file with other test files.
namespace block_lanes_tests {

using mnemo::test::max_rel_err;
using torch::Tensor;
using Outputs = std::vector<Tensor>;

Tensor f64_randn(std::vector<int64_t> shape, double scale = 1.0) {
  return (scale * torch::randn(shape, torch::kFloat64)).requires_grad_();
}

// The outputs (detached) and the gradients of Σ_o o ⊙ r_o with respect to `leaves` (fixed r).
Outputs with_grads(const Outputs& outs, const Outputs& leaves) {
  torch::manual_seed(99);
  Tensor loss = torch::zeros({}, torch::kFloat64);
  Outputs all;
  for (const auto& o : outs) {
    loss = loss + (o * torch::randn(o.sizes(), torch::kFloat64)).sum();
    all.push_back(o.detach());
  }
  for (const auto& g : torch::autograd::grad({loss}, leaves, {}, false, false, /*allow_unused=*/true))
    if (g.defined()) all.push_back(g);
  return all;
}

// run() under one lane, eight lanes in order and eight in reverse: the three agree within `tol`.
void check_lane_orders(const std::function<Outputs()>& run, double tol = 1e-12) {
  Outputs one, forward, reverse;
  {
    const grid::HostLanesScope lanes(1, false);
    one = run();
  }
  {
    const grid::HostLanesScope lanes(8, false);
    forward = run();
  }
  {
    const grid::HostLanesScope lanes(8, true);
    reverse = run();
  }
  REQUIRE(forward.size() == one.size());
  REQUIRE(reverse.size() == one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(max_rel_err(forward[i], reverse[i]) <= tol);
    CHECK(max_rel_err(forward[i], one[i]) <= tol);
  }
}

}  // namespace block_lanes_tests

using namespace block_lanes_tests;

TEST_CASE("host lanes: a block function with a race within a phase gives different results in the two lane orders",
          "[cuda-kernel][lanes]") {
  auto run = [](bool reverse, bool racy) {
    std::vector<double> buf(8, 0.0), out(8, 0.0);
    const grid::HostLanesScope lanes(8, reverse);
    grid::run_on_host(1, 0, [&](int64_t, void*, grid::Lanes l) {
      buf[l.lane] = l.lane + 1.0;
      if (!racy) grid::barrier();              // the correct form: write, barrier, read
      out[l.lane] = buf[(l.lane + 1) % l.count];  // reads a neighbour's write
      grid::barrier();
    });
    return out;
  };
  CHECK(run(false, false) == run(true, false));
  CHECK(run(false, true) != run(true, true));
}

TEST_CASE("host lanes: the deep-memory, Miras, Lattice and Mamba kernels have no race within a phase (8 lanes, both "
          "orders)",
          "[cuda-kernel][lanes]") {
  torch::manual_seed(1);
  SECTION("deep-memory chunk node (momentum, clip, window N > n)") {
    const int64_t B = 1, H = 2, n = 3, N = 5, d = 4, f = 5, hid = 7;
    Outputs x = {f64_randn({B, H, n, d}, 0.5),  f64_randn({B, H, n, f}, 0.5),   f64_randn({B, H, N, d}, 0.5),
                 f64_randn({B, H, N, f}, 0.5),  f64_randn({B, H, N, d}),        f64_randn({B, H, hid, f}, 0.4),
                 f64_randn({B, H, d, hid}, 0.4), f64_randn({B, H, hid, f}, 0.05), f64_randn({B, H, d, hid}, 0.05),
                 f64_randn({B, H, hid, f}, 0.4), f64_randn({B, H, d, hid}, 0.4)};
    auto unit = [](std::vector<int64_t> s, double lo, double hi) {
      return (lo + (hi - lo) * torch::rand(s, torch::kFloat64)).requires_grad_();
    };
    Outputs g = {unit({B, H, n}, 0.5, 1.0), unit({B, H, n}, -0.3, 0.3), unit({B, H, n, N}, 0.0, 0.3),
                 unit({B, H}, 0.8, 1.0),    unit({B, H}, -0.2, 0.2),    unit({B, H, N}, 0.0, 0.3),
                 unit({B, H}, 0.5, 0.9),    unit({B, H, N}, 0.0, 0.3)};
    Outputs leaves = x;
    leaves.insert(leaves.end(), g.begin(), g.end());
    auto inputs_of = [](const Outputs& l) {
      FusedChunkInputs in;
      in.q = l[0], in.qf = l[1], in.k = l[2], in.kf = l[3], in.v = l[4], in.w = {l[5], l[6]}, in.s = {l[7], l[8]};
      in.anchor = {l[9], l[10]}, in.A = l[11], in.D = l[12], in.C = l[13], in.a_end = l[14], in.d_end = l[15];
      in.c_end = l[16], in.p_end = l[17], in.e_end = l[18];
      return in;
    };
    auto run = [&](const Outputs& l) {
      const FusedCpuScope cpu(false);
      const DeepMemoryKernelHostScope kernel(true);
      auto r = fused_mlp_chunk(inputs_of(l), true, 0.3);
      return with_grads({r.y, r.w[0], r.w[1], r.s[0], r.s[1]}, l);
    };
    check_lane_orders([&] { return run(leaves); });
    // fp32 with bf16 products (tensor-core tiles, one lane a tile): the same bits with 8 lanes in either order; one
    // lane differs by the fp32 rounding of block_sum's per-lane partials (the ⟨W̄, W⟩ sums).
    Outputs leaves32;
    for (const auto& t : leaves) leaves32.push_back(t.detach().to(torch::kFloat32).requires_grad_());
    Outputs forward, reverse;
    auto run_bf16 = [&](int lanes, bool reversed) {
      const grid::HostLanesScope scope(lanes, reversed);
      const Bf16ProductsScope bf16(true);
      return run(leaves32);
    };
    forward = run_bf16(8, false);
    reverse = run_bf16(8, true);
    const Outputs one = run_bf16(1, false);
    for (size_t i = 0; i < one.size(); ++i) {
      CAPTURE(i);
      CHECK(torch::equal(forward[i], reverse[i]));
      CHECK(max_rel_err(forward[i], one[i]) <= 1e-6);
    }
  }
  SECTION("Miras segment node (Huber bias, channel-wise gates)") {
    const int64_t B = 2, H = 2, n = 5, d = 4, hid = 16;
    Outputs x = {f64_randn({B, H, n, d}, 0.5), f64_randn({B, H, n, d}, 0.5), f64_randn({B, H, n, d}),
                 torch::log_sigmoid(torch::randn({B, H, n, d}, torch::kFloat64) + 3.0).requires_grad_(),
                 (0.3 * torch::rand({B, H, n, d}, torch::kFloat64)).requires_grad_(),
                 (0.4 + 1.2 * torch::rand({B, H, n}, torch::kFloat64)).requires_grad_(),
                 (1.0 + f64_randn({1, H, 1, d}, 0.2)).detach().requires_grad_(), f64_randn({1, H, 1, d}, 0.2),
                 f64_randn({B, H, hid, d}, 0.5), f64_randn({B, H, d, hid}, 0.25), f64_randn({B, H, hid, d}, 0.5),
                 f64_randn({B, H, d, hid}, 0.25)};
    MirasOptions o;
    o.bias = "huber";
    auto run = [&](const Outputs& l) {
      const MirasKernelHostScope kernel(true);
      MirasSegmentInputs in{l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7], {l[8], l[9]}, {l[10], l[11]}, {}, {}};
      auto r = miras_fused_segment(in, o);
      return with_grads({r.out, r.end[0], r.end[1]}, l);
    };
    check_lane_orders([&] { return run(x); });
    // fp32 with bf16 products (tensor-core tiles, one lane a tile): the same bits in any lane order.
    Outputs x32;
    for (const auto& t : x) x32.push_back(t.detach().to(torch::kFloat32).requires_grad_());
    check_lane_orders(
        [&] {
          const Bf16ProductsScope bf16(true);
          return run(x32);
        },
        0.0);
  }
  SECTION("Lattice scan (DEC, two checkpoint segments, a partial last chunk)") {
    const int64_t B = 1, T = 70, H = 2, m = 5, d = 4;
    Outputs x = {f64_randn({B, T, H, m}, 0.5), f64_randn({B, T, H, m}, 0.5), f64_randn({B, T, H, d}),
                 torch::sigmoid(torch::randn({B, T, H}, torch::kFloat64)).requires_grad_(),
                 torch::sigmoid(torch::randn({B, T, H}, torch::kFloat64) + 2.0).requires_grad_(),
                 f64_randn({B, H, m, d}, 0.5)};
    LatticeState st;
    st.S = x[5];
    check_lane_orders([&] {
      const LatticeKernelHostScope kernel(true);
      auto r = lattice_chunk(x[0], x[1], x[2], x[3], x[4], st, 4, true);
      return with_grads({r.y, r.state.S}, x);
    });
  }
  SECTION("Mamba selective scan (rows with a state over chunks of 8; packed sequences over three channel tiles)") {
    const int64_t B = 2, T = 21, D = 40, N = 16;  // one tile of 40 channels, 640 pairs
    Outputs x = {f64_randn({B, T, D}),
                 torch::softplus(torch::randn({B, T, D}, torch::kFloat64) - 1.0).requires_grad_(),
                 (-torch::exp(torch::rand({D, N}, torch::kFloat64) * 2.7)).requires_grad_(),
                 f64_randn({B, T, N}), f64_randn({B, T, N}), f64_randn({B, D, N})};
    check_lane_orders([&] {
      const MambaKernelHostScope kernel(true);
      auto r = selective_scan_kernel(x[0], x[1], x[2], x[3], x[4], x[5], 8);
      return with_grads({r.o, r.final_state}, x);
    });
    // N 300: tiles of 3 channels (7 = 3 + 3 + 1), a block's 900 pairs over its lanes; two packed sequences.
    Outputs p = {f64_randn({1, 13, 7}), torch::softplus(torch::randn({1, 13, 7}, torch::kFloat64)).requires_grad_(),
                 (-torch::exp(torch::rand({7, 300}, torch::kFloat64))).requires_grad_(), f64_randn({1, 13, 300}),
                 f64_randn({1, 13, 300})};
    const auto cu = torch::tensor(std::vector<int32_t>{0, 5, 13}, torch::kInt32);
    check_lane_orders([&] {
      return with_grads({selective_scan_kernel_packed(p[0], p[1], p[2], p[3], p[4], cu, 4)}, p);
    });
  }
}

TEST_CASE("host lanes: the GLA, delta-rule and layer kernels have no race within a phase (8 lanes, both orders)",
          "[cuda-kernel][lanes]") {
  torch::manual_seed(2);
  SECTION("GLA chunk kernel (key-wise gates, a value tile, an initial state)") {
    const int64_t B = 1, T = 21, H = 2, K = 8, V = 12;
    Outputs x = {f64_randn({B, T, H, K}), f64_randn({B, T, H, K}), f64_randn({B, T, H, V}),
                 torch::log_sigmoid(torch::randn({B, T, H, K}, torch::kFloat64) + 2.0).requires_grad_(),
                 f64_randn({B, H, K, V})};
    GlaFusedTiling tiling;
    tiling.sub_chunk = 4, tiling.tile_v = 8;
    check_lane_orders([&] {
      auto r = gla_chunk_fused(x[0], x[1], x[2], x[3], GlaGate::kKeyWise, 0.3, x[4], 8, {}, tiling);
      return with_grads({r.o, r.final_state}, x);
    });
  }
  SECTION("GLA chunk kernel on tensor cores (bf16, scalar and key-wise gates, a value tile, an initial state)") {
    const int64_t B = 1, T = 21, H = 2, K = 20, V = 12;
    auto bf16_leaf = [](const Tensor& t) { return t.to(torch::kBFloat16).requires_grad_(); };
    Outputs x = {bf16_leaf(torch::randn({B, T, H, K})), bf16_leaf(torch::randn({B, T, H, K})),
                 bf16_leaf(torch::randn({B, T, H, V})),
                 torch::log_sigmoid(torch::randn({B, T, H}) + 2.0).requires_grad_(),
                 torch::randn({B, H, K, V}).requires_grad_()};
    GlaFusedTiling tiling;
    tiling.sub_chunk = 4, tiling.tile_v = 8;
    // Each row's sums are one lane's: the same bits in any order.
    check_lane_orders(
        [&] {
          auto r = gla_chunk_fused(x[0], x[1], x[2], x[3], GlaGate::kScalar, 0.3, x[4], 8, {}, tiling);
          return with_grads({r.o, r.final_state}, x);
        },
        0.0);
    // Key-wise gates, chunks of 32: the rows 16..20 against 0..15 are a sub-block product, forward and backward.
    Outputs xk = {x[0], x[1], x[2], torch::log_sigmoid(torch::randn({B, T, H, K}) + 2.0).requires_grad_(), x[4]};
    check_lane_orders(
        [&] {
          auto r = gla_chunk_fused(xk[0], xk[1], xk[2], xk[3], GlaGate::kKeyWise, 0.3, xk[4], 32, {}, tiling);
          return with_grads({r.o, r.final_state}, xk);
        },
        0.0);
  }
  SECTION("delta-rule chunk kernel (gated, a value tile, an initial state)") {
    const int64_t B = 1, T = 21, H = 2, K = 8, V = 12;
    Outputs x = {l2norm(torch::randn({B, T, H, K}, torch::kFloat64)).requires_grad_(),
                 l2norm(torch::randn({B, T, H, K}, torch::kFloat64)).requires_grad_(), f64_randn({B, T, H, V}),
                 torch::sigmoid(torch::randn({B, T, H}, torch::kFloat64)).requires_grad_(),
                 torch::log_sigmoid(torch::randn({B, T, H}, torch::kFloat64) + 2.0).requires_grad_(),
                 f64_randn({B, H, K, V})};
    // Its backward adds row sums with atomic_add, whose order follows the lanes': rounding only.
    check_lane_orders(
        [&] {
          auto r = delta_rule_chunk_fused(x[0], x[1], x[2], x[3], x[4], x[5], 0.3, 8, {}, 8);
          return with_grads({r.o, r.final_state}, x);
        },
        1e-11);
  }
  SECTION("delta-rule chunk kernel on tensor cores (bf16; padded tiles, a value tile)") {
    const int64_t B = 1, T = 21, H = 2, K = 20, V = 12;
    auto bf16_leaf = [](const Tensor& t) { return t.to(torch::kBFloat16).requires_grad_(); };
    Outputs x = {bf16_leaf(l2norm(torch::randn({B, T, H, K}, torch::kFloat64))),
                 bf16_leaf(l2norm(torch::randn({B, T, H, K}, torch::kFloat64))), bf16_leaf(torch::randn({B, T, H, V})),
                 torch::sigmoid(torch::randn({B, T, H})).requires_grad_(),
                 torch::log_sigmoid(torch::randn({B, T, H}) + 2.0).requires_grad_(),
                 torch::randn({B, H, K, V}).requires_grad_()};
    // Forward and backward: the tensor-core stages sum each row in one lane (no atomic_add), so the bits agree.
    check_lane_orders(
        [&] {
          auto r = delta_rule_chunk_fused(x[0], x[1], x[2], x[3], x[4], x[5], 0.3, 8, {}, 8);
          return with_grads({r.o, r.final_state}, x);
        },
        0.0);
  }
  SECTION("RMSNorm, SwiGLU gate and RoPE kernels") {
    Outputs x = {f64_randn({5, 24}), f64_randn({24}), f64_randn({5, 24}), f64_randn({5, 24}),
                 f64_randn({1, 2, 6, 8})};
    auto angles = torch::arange(6, torch::kFloat64).unsqueeze(1) * torch::rand({1, 4}, torch::kFloat64);
    auto cos = torch::cat({angles.cos(), angles.cos()}, 1), sin = torch::cat({angles.sin(), angles.sin()}, 1);
    check_lane_orders([&] {
      return with_grads({rms_norm_fused_kernel(x[0], x[1], 1e-6), swiglu_gate_fused_kernel(x[2], x[3]),
                         rope_fused_kernel(x[4], cos, sin)},
                        x);
    });
  }
}
