// Launchers of the delta-rule chunk kernels (chunk_kernel.cuh, chunk_kernel.cu): torch-free, raw pointers to
// device memory and a cudaStream_t passed as void*. Compiled into mnemo_cuda_kernels by nvcc; called from
// chunk_fused.cpp on CUDA tensors when the build links the kernels (MNEMO_CUDA_KERNELS).
#pragma once

#include <algorithm>
#include <cstddef>

#include "runtime/delta_rule/chunk_kernel.cuh"

namespace mnemo::delta_rule_kernel {

enum class Dtype { f32, f64, bf16 };  // element type of q, k, v, o, dO; Acc is f64 for f64, else f32

// Dynamic shared memory a block may use on sm_80 / sm_90 (opt-in above 48 KiB); a larger layout runs from a
// global workspace slice per block.
constexpr std::size_t kMaxSharedBytes = 99 * 1024;
constexpr int kThreads = 256;
static_assert(kThreads % 32 == 0, "the tensor-core stages (block_mma) run whole warps");

// Pointers: q, k, v, o, dout in `dtype`; beta, g, states, L⁻¹, U', scratch and gradients in Acc. Optional ones may
// be null as in ForwardArgs / BackwardArgs. `cu_seqlens` and `chunk_offsets` are device int32 arrays.
struct ForwardLaunch {
  Problem p;
  Dtype dtype;
  const void *q, *k, *v, *beta, *g, *h0;
  void *o, *h, *ht, *linv, *u;
};

struct BackwardLaunch {
  Problem p;
  Dtype dtype;
  const void *q, *k, *v, *dout, *beta, *g, *h, *linv, *u, *dht;
  void *dh, *dr, *dq, *dk, *dv, *dbeta, *dg, *dh0;
};

// The stages of each pass in launch order (chunk_kernel.cuh): their grids and tile bytes.
enum class Stage { prepare, state_forward, output, local_backward, state_backward, gradients };
constexpr Stage kForwardStages[] = {Stage::prepare, Stage::state_forward, Stage::output};
constexpr Stage kBackwardStages[] = {Stage::local_backward, Stage::state_backward, Stage::gradients};

inline int64_t stage_blocks(Stage s, const Problem& p) {
  switch (s) {
    case Stage::prepare: return p.chunk_blocks();
    case Stage::state_forward:
    case Stage::state_backward: return p.sequence_blocks();
    default: return p.chunk_tile_blocks();
  }
}

template <class T, class Acc>
std::size_t stage_bytes(Stage s, const Problem& p) {
  if constexpr (kTensorCores<T>) {
    switch (s) {
      case Stage::prepare: return tile_bytes<PrepareMmaTiles<Acc>>(p);
      case Stage::state_forward: return tile_bytes<StateMmaTiles<Acc>>(p);
      case Stage::output: return tile_bytes<OutputMmaTiles<Acc>>(p);
      case Stage::local_backward: return tile_bytes<LocalMmaTiles<Acc>>(p);
      case Stage::state_backward: return tile_bytes<StateBackwardMmaTiles<Acc>>(p);
      case Stage::gradients: return tile_bytes<GradientMmaTiles<Acc>>(p);
    }
  }
  switch (s) {
    case Stage::prepare: return tile_bytes<PrepareTiles<Acc>>(p);
    case Stage::state_forward:
    case Stage::state_backward: return tile_bytes<StateTiles<Acc>>(p);
    case Stage::output: return tile_bytes<OutputTiles<Acc>>(p);
    case Stage::local_backward: return tile_bytes<LocalTiles<Acc>>(p);
    case Stage::gradients: break;
  }
  return tile_bytes<GradientTiles<Acc>>(p);
}

inline std::size_t stage_bytes(Stage s, const Problem& p, Dtype d) {
  switch (d) {
    case Dtype::f64: return stage_bytes<double, double>(s, p);
    case Dtype::bf16: return stage_bytes<grid::bf16, float>(s, p);
    case Dtype::f32: break;
  }
  return stage_bytes<float, float>(s, p);
}

// A block's slice of the global workspace starts at a multiple of this many bytes (the tiles' alignment,
// block_mma.cuh's included).
constexpr std::size_t kWorkspaceAlign = 128;
inline std::size_t workspace_stride(std::size_t block_bytes) {
  return (block_bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// Global workspace a pass needs: the largest of its stages' (0 where a stage's tiles fit the shared memory).
template <std::size_t N>
std::size_t workspace_bytes(const Stage (&stages)[N], const Problem& p, Dtype d) {
  std::size_t most = 0;
  for (Stage s : stages) {
    const std::size_t bytes = stage_bytes(s, p, d);
    if (bytes > kMaxSharedBytes)
      most = std::max(most, workspace_stride(bytes) * static_cast<std::size_t>(stage_blocks(s, p)));
  }
  return most;
}

// The element and accumulation types of a Dtype, as a tag: fn(TypeTag<T, Acc>{}) for the launch's dtype.
template <class T, class Acc>
struct TypeTag {
  using element = T;
  using acc = Acc;
};
template <class Fn>
decltype(auto) with_types(Dtype d, Fn&& fn) {
  switch (d) {
    case Dtype::f64: return fn(TypeTag<double, double>{});
    case Dtype::bf16: return fn(TypeTag<grid::bf16, float>{});
    case Dtype::f32: break;
  }
  return fn(TypeTag<float, float>{});
}

// The typed kernel arguments of a launch record (the device launchers and the host grid both start from these).
template <class T, class Acc>
ForwardArgs<T, Acc> typed_args(const ForwardLaunch& l) {
  return {l.p, static_cast<const T*>(l.q), static_cast<const T*>(l.k), static_cast<const T*>(l.v),
          static_cast<const Acc*>(l.beta), static_cast<const Acc*>(l.g), static_cast<const Acc*>(l.h0),
          static_cast<T*>(l.o), static_cast<Acc*>(l.h), static_cast<Acc*>(l.ht), static_cast<Acc*>(l.linv),
          static_cast<Acc*>(l.u)};
}
template <class T, class Acc>
BackwardArgs<T, Acc> typed_args(const BackwardLaunch& l) {
  return {l.p, static_cast<const T*>(l.q), static_cast<const T*>(l.k), static_cast<const T*>(l.v),
          static_cast<const T*>(l.dout), static_cast<const Acc*>(l.beta), static_cast<const Acc*>(l.g),
          static_cast<const Acc*>(l.h), static_cast<const Acc*>(l.linv), static_cast<const Acc*>(l.u),
          static_cast<const Acc*>(l.dht), static_cast<Acc*>(l.dh), static_cast<Acc*>(l.dr),
          static_cast<Acc*>(l.dq), static_cast<Acc*>(l.dk), static_cast<Acc*>(l.dv), static_cast<Acc*>(l.dbeta),
          static_cast<Acc*>(l.dg), static_cast<Acc*>(l.dh0)};
}

// Launch every stage of a pass on `stream` (cudaStream_t), in order; `workspace` holds workspace_bytes(...) bytes
// (or is null when that is 0). Returns null on success, else the CUDA error's text. A forward launch with o null
// runs the prepare and state stages only (the backward recomputes h, L⁻¹ and U' that way instead of keeping them).
const char* launch_forward(const ForwardLaunch& launch, void* workspace, void* stream);
const char* launch_backward(const BackwardLaunch& launch, void* workspace, void* stream);

}  // namespace mnemo::delta_rule_kernel
