// Tensor-core tile products for block code (block_grid.cuh): C (+)= A·B with A [M×K] and B [K×N] in bf16 and C in
// fp32, all three in shared memory (or a block's global workspace slice), M, N and K multiples of 16.
//
// On the device (sm_80 and later) the block's warps take the 16×16 tiles of C in turn; each tile is K/16 steps of
// nvcuda::wmma m16n16k16 (bf16 operands, fp32 accumulation), the products flash-linear-attention's Triton kernels
// run through tl.dot. On the host a lane stands for a warp and computes the same tiles, each element an fp32 sum of
// the exact bf16 products (a bf16 × bf16 product is exact in fp32), so the host run has the kernel's roundings
// (operands rounded to bf16 where the block code rounds them, fp32 sums); only the order of each sum may differ.
//
// Layouts: Layout::row puts element (r, c) of a matrix at r·ld + c, Layout::col at c·ld + r, so a transposed operand
// is the same buffer read in the other layout (Kᵀ of a row-major K [n×d] is Layout::col with ld = d). The device
// needs every tile start 32-byte aligned: the buffers come from SharedArena::take_aligned and each ld is a multiple
// of 16 elements (mma_ld).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "runtime/kernels/bf16.cuh"
#include "runtime/kernels/block_grid.cuh"

#if defined(__CUDACC__)
#include <mma.h>
#endif

namespace mnemo::grid {

enum class Layout { row, col };

constexpr int kMmaTile = 16;
constexpr std::size_t kMmaAlign = 32;  // bytes: wmma's pointer alignment

// n rounded up to the tile (the padded extent of a dimension; padding rows and columns hold zeros).
MNEMO_HD int mma_ld(int n) { return (n + kMmaTile - 1) / kMmaTile * kMmaTile; }

// The warps of a block as block code sees them: on the device warp lane/32 of count/32; on the host each lane
// stands for a warp.
struct Warps {
  int warp;
  int count;
};
MNEMO_HD Warps warps_of(Lanes lanes) {
#if defined(__CUDA_ARCH__)
  return {lanes.lane / 32, lanes.count / 32};
#else
  return {lanes.lane, lanes.count};
#endif
}

template <Layout L>
MNEMO_HD int64_t mma_at(int r, int c, int ld) {
  return L == Layout::row ? static_cast<int64_t>(r) * ld + c : static_cast<int64_t>(c) * ld + r;
}

// Element (r, c) of C (+)= A·B as one fp32 sum over k.
template <Layout LA, Layout LB>
MNEMO_HD void mma_element(int r, int c, int K, const bf16* A, int lda, const bf16* B, int ldb, float* C, int ldc,
                          bool accumulate) {
  float acc = accumulate ? C[static_cast<int64_t>(r) * ldc + c] : 0.0f;
  for (int k = 0; k < K; ++k) acc += bf16_to_float(A[mma_at<LA>(r, k, lda)]) * bf16_to_float(B[mma_at<LB>(k, c, ldb)]);
  C[static_cast<int64_t>(r) * ldc + c] = acc;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <Layout L>
using wmma_layout = typename std::conditional<L == Layout::row, nvcuda::wmma::row_major,
                                              nvcuda::wmma::col_major>::type;
#endif

// Rows [row0, row0 + rows) of a [tokens, heads, width] buffer (head `head`), columns [col0, col0 + cols), times
// `factor`, into a zero-padded bf16 tile [padded_rows, ld]; entries past the data are zeros. One phase.
template <class Acc, class T>
MNEMO_HD void load_rows_bf16(const T* x, int64_t row0, int64_t heads, int64_t head, int64_t width, int64_t col0,
                             int cols, int rows, int padded_rows, int ld, Acc factor, bf16* tile, Lanes lanes) {
  MNEMO_FOR_LANES(e, padded_rows * ld, lanes) {
    const int i = e / ld, d = e % ld;
    const Acc value =
        i < rows && d < cols ? factor * load_as<Acc>(x + ((row0 + i) * heads + head) * width + col0 + d) : Acc(0);
    tile[e] = float_to_bf16(static_cast<float>(value));
  }
}

// C[M×N] = A·B, or C += A·B when `accumulate`; one phase (the caller's barriers separate it from the writes of A, B
// and C before and the reads of C after).
template <Layout LA, Layout LB>
MNEMO_HD void block_mma(Lanes lanes, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb, float* C,
                        int ldc, bool accumulate) {
  const Warps warps = warps_of(lanes);
  const int tiles_n = N / kMmaTile, tiles = (M / kMmaTile) * tiles_n;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  namespace wmma = nvcuda::wmma;
  for (int t = warps.warp; t < tiles; t += warps.count) {
    const int r0 = (t / tiles_n) * kMmaTile, c0 = (t % tiles_n) * kMmaTile;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if (accumulate)
      wmma::load_matrix_sync(acc, C + static_cast<int64_t>(r0) * ldc + c0, ldc, wmma::mem_row_major);
    else
      wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += kMmaTile) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma_layout<LA>> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma_layout<LB>> b;
      wmma::load_matrix_sync(a, reinterpret_cast<const __nv_bfloat16*>(A + mma_at<LA>(r0, k0, lda)), lda);
      wmma::load_matrix_sync(b, reinterpret_cast<const __nv_bfloat16*>(B + mma_at<LB>(k0, c0, ldb)), ldb);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + static_cast<int64_t>(r0) * ldc + c0, acc, ldc, wmma::mem_row_major);
  }
#elif defined(__CUDA_ARCH__)
  // A device without bf16 tensor cores: one element per thread.
  (void)warps, (void)tiles;
  for (int e = lanes.lane; e < M * N; e += lanes.count)
    mma_element<LA, LB>(e / N, e % N, K, A, lda, B, ldb, C, ldc, accumulate);
#else
  // The host: the same tiles, one element after another.
  for (int t = warps.warp; t < tiles; t += warps.count) {
    const int r0 = (t / tiles_n) * kMmaTile, c0 = (t % tiles_n) * kMmaTile;
    for (int r = r0; r < r0 + kMmaTile; ++r)
      for (int c = c0; c < c0 + kMmaTile; ++c) mma_element<LA, LB>(r, c, K, A, lda, B, ldb, C, ldc, accumulate);
  }
#endif
}


constexpr int kProductWarps = 8;  // block_product's warps a block at most (256 threads)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// block_product's shared tiles: one variable of a function that is not a template, so a kernel holds one copy
// however many products it instantiates (a __shared__ array inside the template would be one per instantiation).
struct ProductScratch {
  bf16 staged[kProductWarps][2][kMmaTile * kMmaTile];  // each warp's A and B tiles
  float sums[kProductWarps][kMmaTile * kMmaTile];      // each warp's C tile
};
__device__ inline ProductScratch& product_scratch() {
  __shared__ __align__(32) ProductScratch scratch;
  return scratch;
}
#endif

// Σ_p a(i, p) b(p, j) for i < M, j < N, p < K, each sum handed to out(i, j, sum), for block code whose operands are
// not bf16 tiles: a and b give the elements (of any layout, scaled or masked as the caller needs) in Acc. One phase:
// the caller's barriers separate it from the writes of the operands before and the reads of out's writes after;
// each (i, j) is computed whole by one lane (a warp on the device), so no two lanes write the same output.
//   bf16_operands false: one work item an element, an Acc sum in the order p = 0, 1, ... (fp64 and fp32 kernels).
//   bf16_operands true (Acc = float): operands rounded to bf16, fp32 sums, as block_mma above. On the device each
//     warp stages its 16×16 operand tiles in shared memory (MaxWarps warps a block at most) for
//     nvcuda::wmma; on the host a lane stands for a warp and sums the rounded products of each element of its tiles.
template <class Acc, class AFn, class BFn, class Out>
MNEMO_HD void block_product(Lanes lanes, bool bf16_operands, int64_t M, int64_t N, int64_t K, AFn a, BFn b, Out out) {
  if constexpr (std::is_same<Acc, float>::value) {
    if (bf16_operands) {
      const int tiles_n = mma_ld(static_cast<int>(N)) / kMmaTile;
      const int tiles = mma_ld(static_cast<int>(M)) / kMmaTile * tiles_n;
      const int k_pad = mma_ld(static_cast<int>(K));
      auto rounded_a = [&](int64_t i, int64_t p) { return i < M && p < K ? float_to_bf16(a(i, p)) : bf16{}; };
      auto rounded_b = [&](int64_t p, int64_t j) { return p < K && j < N ? float_to_bf16(b(p, j)) : bf16{}; };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
      namespace wmma = nvcuda::wmma;
      constexpr int kTileElements = kMmaTile * kMmaTile;
      ProductScratch& scratch = product_scratch();
      auto& staged = scratch.staged;
      auto& sums = scratch.sums;
      const int warp = lanes.lane / 32, lane = lanes.lane % 32, warps = lanes.count / 32;
      if (warps > kProductWarps) __trap();  // a launch of more threads than the scratch serves
      for (int t = warp; t < tiles; t += warps) {
        const int r0 = (t / tiles_n) * kMmaTile, c0 = (t % tiles_n) * kMmaTile;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k0 = 0; k0 < k_pad; k0 += kMmaTile) {
          // The operands may live in global memory (the kernels' workspaces): each lane reads all of its 2 × 8
          // entries before it writes any, so their loads are in flight together (one round trip a step, not eight).
          constexpr int kPerLane = kTileElements / 32;
          bf16 a_vals[kPerLane], b_vals[kPerLane];
#pragma unroll
          for (int it = 0; it < kPerLane; ++it) {
            const int e = lane + 32 * it, r = e / kMmaTile, c = e % kMmaTile;
            a_vals[it] = rounded_a(r0 + r, k0 + c);
            b_vals[it] = rounded_b(k0 + r, c0 + c);
          }
#pragma unroll
          for (int it = 0; it < kPerLane; ++it) {
            staged[warp][0][lane + 32 * it] = a_vals[it];
            staged[warp][1][lane + 32 * it] = b_vals[it];
          }
          __syncwarp();
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
          wmma::load_matrix_sync(fa, reinterpret_cast<const __nv_bfloat16*>(staged[warp][0]), kMmaTile);
          wmma::load_matrix_sync(fb, reinterpret_cast<const __nv_bfloat16*>(staged[warp][1]), kMmaTile);
          wmma::mma_sync(acc, fa, fb, acc);
          __syncwarp();  // the tiles are free for the next step
        }
        wmma::store_matrix_sync(sums[warp], acc, kMmaTile, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < kTileElements; e += 32) {
          const int64_t i = r0 + e / kMmaTile, j = c0 + e % kMmaTile;
          if (i < M && j < N) out(i, j, sums[warp][e]);
        }
        __syncwarp();
      }
#else
      // The host, or a device without bf16 tensor cores: the same roundings, one element after another (on the
      // host, each lane its tiles in turn).
      auto element = [&](int64_t i, int64_t j) {
        float sum = 0.0f;
        for (int64_t p = 0; p < K; ++p) sum += bf16_to_float(rounded_a(i, p)) * bf16_to_float(rounded_b(p, j));
        out(i, j, sum);
      };
      (void)k_pad;
#if defined(__CUDA_ARCH__)
      (void)tiles;
      for (int64_t e = lanes.lane; e < M * N; e += lanes.count) element(e / N, e % N);
#else
      const Warps w = warps_of(lanes);
      for (int t = w.warp; t < tiles; t += w.count)
        for (int e = 0; e < kMmaTile * kMmaTile; ++e) {
          const int64_t i = (t / tiles_n) * kMmaTile + e / kMmaTile, j = (t % tiles_n) * kMmaTile + e % kMmaTile;
          if (i < M && j < N) element(i, j);
        }
#endif
#endif
      return;
    }
  }
  (void)bf16_operands;
  MNEMO_FOR_LANES(e, M * N, lanes) {
    const int64_t i = e / N, j = e % N;
    Acc sum = 0;
    for (int64_t p = 0; p < K; ++p) sum += a(i, p) * b(p, j);
    out(i, j, sum);
  }
}

}  // namespace mnemo::grid
