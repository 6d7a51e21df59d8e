// The gated-linear-attention chunk kernels' interface (torch-free: raw pointers, sizes, a stream), shared by the
// CUDA launchers (chunk_kernel.cu) and the host runs (chunk_fused.cpp). One set of kernels covers the family:
// key-wise log-decay gates gk [T, H, K] (GLA), one per-head scalar gate g [T, H] (simple GLA, RetNet) and no gate
// (linear attention). The block code and its equations are in chunk_kernel.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mnemo::gla_kernel {

enum class Gate : int { kKeyWise = 0, kScalar = 1, kNone = 2 };
enum class Element : int { kFloat32 = 0, kFloat64 = 1, kBFloat16 = 2 };  // q, k, v, o, dO
// Accumulation, states, gates and gradients: fp32 for fp32/bf16 elements, fp64 for fp64.

struct Tiling {
  int chunk = 64;      // C: tokens per chunk (the state is carried from chunk to chunk)
  int sub_chunk = 16;  // c: rows per sub-block of the intra-chunk matrix (off-diagonal blocks factorised)
  int tile_v = 64;     // value columns per block (blocks of one (sequence, head) split V)
};

// Sizes. Tokens are rows of [tokens, H, ·] arrays: batch-major [B, T] flattened, or one packed batch (B = 1)
// whose sequences cu_seqlens (int32, [sequences + 1], fla's convention) delimits.
struct Problem {
  int64_t sequences = 0;  // B, or len(cu_seqlens) - 1
  int64_t seq_len = 0;    // T per sequence (without cu_seqlens)
  int64_t heads = 0, key_dim = 0, value_dim = 0;
  Gate gate = Gate::kKeyWise;
  double scale = 1.0;
  const int32_t* cu_seqlens = nullptr;    // [sequences + 1] or null
  const int32_t* state_slots = nullptr;   // [sequences + 1]: first chunk-state slot of each sequence (with cu_seqlens)
  int64_t slots = 0;                      // chunk-state slots of all sequences (the chunk-parallel grids' rows)
  Tiling tiling;
};

// (constexpr: callable from device code under --expt-relaxed-constexpr.)
// Chunk-state slots: each sequence stores its N = ceil(len / C) chunk-start states and its final state.
constexpr int64_t chunks_of(int64_t len, int chunk) { return (len + chunk - 1) / chunk; }
constexpr int64_t value_tiles(const Problem& p) { return (p.value_dim + p.tiling.tile_v - 1) / p.tiling.tile_v; }
// Grids: the state stages run one block per (sequence, head, value tile), the output and gradient stages one per
// (chunk-state slot, head, value tile) (a sequence's final-state slot has no chunk: its blocks return at once).
constexpr int64_t blocks(const Problem& p) { return p.sequences * p.heads * value_tiles(p); }
constexpr int64_t chunk_blocks(const Problem& p) { return p.slots * p.heads * value_tiles(p); }

struct ForwardPointers {
  const void* q = nullptr;   // [tokens, H, K] element
  const void* k = nullptr;   // [tokens, H, K] element
  const void* v = nullptr;   // [tokens, H, V] element
  const void* gate = nullptr;  // accumulation type: [tokens, H, K] key-wise, [tokens, H] scalar, null for none
  const void* s0 = nullptr;  // [sequences, H, K, V] accumulation type, or null (zeros)
  void* o = nullptr;         // [tokens, H, V] element
  void* final_state = nullptr;   // [sequences, H, K, V] accumulation type
  void* chunk_states = nullptr;  // [slots, H, K, V] accumulation type (kept for the backward)
};

struct BackwardPointers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* gate = nullptr;
  const void* chunk_states = nullptr;  // the forward's
  const void* d_o = nullptr;           // [tokens, H, V] element
  const void* d_final_state = nullptr;  // [sequences, H, K, V] accumulation type, or null (zeros)
  // Outputs, accumulation type. dq, dk, dgate hold one partial per value tile ([value_tiles, tokens, H, ·]),
  // summed by the caller; dv and ds0 are complete.
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;     // [tokens, H, V]
  void* dgate = nullptr;  // [value_tiles, tokens, H, K | 1]; untouched for Gate::kNone
  void* ds0 = nullptr;    // [sequences, H, K, V]
  void* d_states = nullptr;  // [slots, H, K, V] scratch: the adjoint of each chunk-end state
};

// CUDA launchers (chunk_kernel.cu; only in builds with the CUDA kernels). `stream` is a cudaStream_t. A forward
// with o null runs the state stage alone (the backward recomputes the chunk states that way instead of keeping them).
// They throw std::runtime_error naming the CUDA error when a launch fails.
void launch_forward(const Problem& p, const ForwardPointers& ptr, Element element, void* stream);
void launch_backward(const Problem& p, const BackwardPointers& ptr, Element element, void* stream);
// The largest dynamic shared memory a block may opt into on the current device.
std::size_t device_shared_limit();
// The tiling the launchers use on the current device: the largest chunk (64, 32, 16, 8) whose forward and
// backward blocks both fit device_shared_limit(), with value tiles narrowed (down to 16) while there are fewer
// blocks than multiprocessors; the host runs take a Tiling from the caller.
Tiling device_tiling(const Problem& p, Element element);

}  // namespace mnemo::gla_kernel
