// The tensor-core tile product of block code (runtime/kernels/block_mma.cuh) on the host grid: C (+)= A·B for every
// operand layout against the fp64 product of the same bf16 values, and the same bits whichever way 8 host lanes (the
// warps' stand-ins) take their turns. Tags [cuda-kernel][mma].
#include <catch2/catch.hpp>

#include <vector>

#include <torch/torch.h>

#include "runtime/kernels/block_mma.cuh"
#include "runtime/kernels/host_grid.h"

using namespace mnemo;

// Helpers in a named namespace: unity builds compile this file with other test files.
namespace block_mma_tests {

using grid::bf16;
using grid::Layout;

// A [rows × cols] matrix stored in `layout` with leading dimension ld (bf16 values and their fp64 copy).
struct Operand {
  std::vector<bf16> bits;
  std::vector<double> values;  // row-major [rows × cols]
  int ld;
};

Operand random_operand(int rows, int cols, Layout layout, uint64_t seed) {
  torch::manual_seed(seed);
  auto x = torch::randn({rows, cols}, torch::kFloat64).to(torch::kBFloat16).to(torch::kFloat64);
  Operand op;
  op.ld = layout == Layout::row ? cols : rows;
  op.bits.resize(static_cast<std::size_t>(rows) * cols);
  op.values.resize(op.bits.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const double v = x[r][c].item<double>();
      op.values[static_cast<std::size_t>(r) * cols + c] = v;
      const std::size_t at = layout == Layout::row ? static_cast<std::size_t>(r) * op.ld + c
                                                   : static_cast<std::size_t>(c) * op.ld + r;
      op.bits[at] = grid::float_to_bf16(static_cast<float>(v));
    }
  return op;
}

// C = (accumulate ? C0 : 0) + A·B on the host grid with its current lanes.
template <Layout LA, Layout LB>
std::vector<float> run_mma(int M, int N, int K, const Operand& a, const Operand& b, const std::vector<float>& c0,
                           bool accumulate) {
  std::vector<float> c = c0;
  grid::run_on_host(1, 0, [&](int64_t, void*, grid::Lanes lanes) {
    grid::block_mma<LA, LB>(lanes, M, N, K, a.bits.data(), a.ld, b.bits.data(), b.ld, c.data(), N, accumulate);
  });
  return c;
}

template <Layout LA, Layout LB>
void check_layouts() {
  const int M = 32, N = 48, K = 64;
  const Operand a = random_operand(M, K, LA, 1), b = random_operand(K, N, LB, 2);
  std::vector<float> c0(static_cast<std::size_t>(M) * N);
  for (std::size_t i = 0; i < c0.size(); ++i) c0[i] = static_cast<float>(0.25 * static_cast<double>(i % 7) - 0.5);
  for (bool accumulate : {false, true}) {
    CAPTURE(static_cast<int>(LA), static_cast<int>(LB), accumulate);
    const auto got = run_mma<LA, LB>(M, N, K, a, b, c0, accumulate);
    double worst = 0;
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < N; ++c) {
        double ref = accumulate ? c0[static_cast<std::size_t>(r) * N + c] : 0.0;
        for (int k = 0; k < K; ++k)
          ref += a.values[static_cast<std::size_t>(r) * K + k] * b.values[static_cast<std::size_t>(k) * N + c];
        worst = std::max(worst, std::abs(got[static_cast<std::size_t>(r) * N + c] - ref));
      }
    CHECK(worst <= 1e-4);  // 64 exact products of O(1) summed in fp32: a few ulps of |C| ≈ 8
    for (bool reverse : {false, true}) {
      const grid::HostLanesScope lanes(8, reverse);
      CHECK(run_mma<LA, LB>(M, N, K, a, b, c0, accumulate) == got);  // each tile is one lane's: the same bits
    }
  }
}

TEST_CASE("block_mma: C (+)= A·B of bf16 tiles in fp32, every layout, the same bits with 8 lanes in either order",
          "[cuda-kernel][mma]") {
  check_layouts<Layout::row, Layout::row>();
  check_layouts<Layout::row, Layout::col>();
  check_layouts<Layout::col, Layout::row>();
  check_layouts<Layout::col, Layout::col>();
}

TEST_CASE("block_mma: padded extents and aligned slices", "[cuda-kernel][mma]") {
  CHECK(grid::mma_ld(1) == 16);
  CHECK(grid::mma_ld(16) == 16);
  CHECK(grid::mma_ld(37) == 48);
  // take_aligned starts a slice at the next multiple of its alignment; take keeps 16-byte steps.
  grid::SharedArena arena(nullptr);
  arena.take<float>(3);  // 12 bytes → 16
  CHECK(arena.used() == 16);
  arena.take_aligned<bf16>(16, grid::kMmaAlign);  // starts at 32, 32 bytes
  CHECK(arena.used() == 64);
  arena.take<bf16>(1);  // 80
  arena.take_aligned<float>(8, grid::kMmaAlign);  // starts at 96
  CHECK(arena.used() == 128);
}

}  // namespace block_mma_tests
