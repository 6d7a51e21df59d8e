// Block-level kernel code that runs as a CUDA kernel and, unchanged, on the host over a sequential grid.
//
// A fused kernel here is written as a function of one block: `body(block, shared, lanes)`. Inside it, work is
// spread over the block's threads with MNEMO_FOR_LANES and separated into phases by grid::barrier():
//   MNEMO_FOR_LANES(i, n, lanes) { tile[i] = ...; }   // phase 1: every work item i in [0, n)
//   grid::barrier();                                   // __syncthreads() on the device
//   MNEMO_FOR_LANES(i, m, lanes) { ... tile[...] ... } // phase 2 reads what phase 1 wrote
// On the device `lanes` is this thread (threadIdx.x of blockDim.x); on the host it is one lane standing for the
// whole block (lane 0 of 1), so each loop covers all of its items in order and a barrier has nothing to wait for.
// The host run therefore executes the kernel's own decomposition — tiles, chunk loop, shared-memory layout,
// accumulation order per work item — and the CPU tests check it against the reference forms in fp64 and fp32
// (docs/gpu.md, "Kernels proven on the CPU"). A data race between threads of one phase shows in a host run with
// several lanes (host_grid.h HostLanesScope): the lanes take turns phase by phase, in lane order or in reverse, so a
// value one lane writes and another reads (or writes) in the same phase differs between the two orders
// (tests/test_block_lanes.cpp); `compute-sanitizer --tool racecheck` covers shared memory on a GPU
// (scripts/gpu-check).
//
// Rules for block code: no warp intrinsics outside helpers that have a host form here; every cross-thread
// exchange goes through shared memory and a barrier; a reduction writes per-lane partials, barrier, then lane 0
// (or a loop over partials) combines them — with one host lane this is the full sum — or adds into a shared
// accumulator with atomic_add (then the device's summation order is unspecified).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define MNEMO_HD __host__ __device__ __forceinline__
#define MNEMO_GLOBAL __global__
#else
#define MNEMO_HD inline
#endif

namespace mnemo::grid {

// The threads of one block as block code sees them.
struct Lanes {
  int lane;   // this thread's index in the block (host: 0)
  int count;  // threads in the block (host: 1)
};

#if !defined(__CUDA_ARCH__)
// The host's barrier while a block runs with several lanes (host_grid.h, HostLanesScope): the calling lane hands the
// turn on and waits for its turn in the next phase. Unset (one lane) there is nothing to wait for.
namespace host_barrier {
struct Hook {
  void (*wait)(void* context);
  void* context;
};
inline thread_local Hook current{nullptr, nullptr};
}  // namespace host_barrier
#endif

// Phase separator: __syncthreads() on the device; on the host nothing with one lane (phases run one after another),
// the turn scheduler's hand-over with several (host_grid.h).
MNEMO_HD void barrier() {
#if defined(__CUDA_ARCH__)
  __syncthreads();
#else
  if (host_barrier::current.wait) host_barrier::current.wait(host_barrier::current.context);
#endif
}

// Adds x to *address; many lanes of one phase may add to the same address (on the device an atomic add, whose
// order between lanes is unspecified; on the host the one lane adds in item order).
template <class Acc>
MNEMO_HD void atomic_add(Acc* address, Acc x) {
#if defined(__CUDA_ARCH__)
  atomicAdd(address, x);
#else
  *address += x;
#endif
}

// Shared-memory carve-up: consecutive, 16-byte aligned slices of one dynamic shared buffer, in the same order on
// both sides, so the host run uses the kernel's layout (and its byte count, checked against the device limit).
class SharedArena {
 public:
  MNEMO_HD explicit SharedArena(void* base) : base_(static_cast<unsigned char*>(base)), used_(0) {}
  template <class T>
  MNEMO_HD T* take(std::size_t count) {
    T* slice = reinterpret_cast<T*>(base_ + used_);
    used_ += (count * sizeof(T) + 15) / 16 * 16;
    return slice;
  }
  // A slice whose start is aligned to `align` bytes (a power of two), e.g. wmma's 32 (block_mma.cuh); the buffer's
  // base must be as aligned (the kernels' dynamic shared memory and workspace slices are 128-byte aligned).
  template <class T>
  MNEMO_HD T* take_aligned(std::size_t count, std::size_t align) {
    used_ = (used_ + align - 1) / align * align;
    return take<T>(count);
  }
  MNEMO_HD std::size_t used() const { return used_; }

 private:
  unsigned char* base_;
  std::size_t used_;
};

// Bytes a sequence of slices takes in a SharedArena (for the launch's dynamic shared-memory size).
MNEMO_HD std::size_t shared_bytes(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace mnemo::grid

// Work items [0, n) of one phase spread over the block's threads.
#define MNEMO_FOR_LANES(i, n, lanes) for (int i = (lanes).lane; i < (n); i += (lanes).count)

#if defined(__CUDA_ARCH__)
#define MNEMO_UNROLL _Pragma("unroll")
#else
#define MNEMO_UNROLL
#endif

namespace mnemo::grid {

// Items per batch of for_lanes_batched: 8 loads in flight a thread, 16 items a thread for a 64 × 64 tile at 256
// threads (two memory round trips instead of sixteen).
constexpr int kLoadBatch = 8;

// The work items of MNEMO_FOR_LANES (the same items on the same lanes), each thread's items Batch at a time:
// `load(i)` for every item of a batch, then `store(i, value)` for each. A loop that reads global memory and writes
// shared memory item by item waits one memory round trip per item, since the compiler cannot move a load above a
// store that may alias it; here a batch's loads are in flight together. Like any phase, `load` must not read what
// `store` writes in the same phase (then the order of items does not matter, and the results are bit for bit those
// of the plain loop). `skip`: each thread's first `skip` items are left out (done elsewhere).
template <int Batch = kLoadBatch, class Load, class Store>
MNEMO_HD void for_lanes_batched(int n, Lanes lanes, Load&& load, Store&& store, int skip = 0) {
  using Value = decltype(load(0));
  for (int base = lanes.lane + skip * lanes.count; base < n; base += Batch * lanes.count) {
    Value values[Batch]{};
    MNEMO_UNROLL
    for (int b = 0; b < Batch; ++b) {
      const int i = base + b * lanes.count;
      if (i < n) values[b] = load(i);
    }
    MNEMO_UNROLL
    for (int b = 0; b < Batch; ++b) {
      const int i = base + b * lanes.count;
      if (i < n) store(i, values[b]);
    }
  }
}

// Software pipelining of a sequential chunk loop: a thread's loads of a tile issued early (`issue`, e.g. for the next
// chunk as soon as this chunk's operands are in shared memory) and written to shared memory later (`write`, at the
// top of the next step), so that the loads are in flight while the chunk computes and the chain of chunk steps
// waits on none of them. The items are those of MNEMO_FOR_LANES (the same items on the same lanes); a thread holds
// its first PerLane in registers and loads the others when it writes them, a batch at a time. On the device a
// 64 × 64 tile at 256 threads is held whole; a host lane, standing for the whole block, holds its first PerLane
// items and loads the rest, so the host run takes both paths. What `load` reads must not change between issue and
// write, and `write` must be given the same n and load as the `issue` before it (the values are then bit for bit
// those of loading at write time).
template <class Value, int PerLane>
class PrefetchedTile {
 public:
  template <class Load>
  MNEMO_HD void issue(int n, Lanes lanes, Load&& load) {
    MNEMO_UNROLL
    for (int b = 0; b < PerLane; ++b) {
      const int i = lanes.lane + b * lanes.count;
      if (i < n) held_[b] = load(i);
    }
  }
  template <class Load, class Store>
  MNEMO_HD void write(int n, Lanes lanes, Load&& load, Store&& store) const {
    MNEMO_UNROLL
    for (int b = 0; b < PerLane; ++b) {
      const int i = lanes.lane + b * lanes.count;
      if (i < n) store(i, held_[b]);
    }
    for_lanes_batched(n, lanes, load, store, PerLane);
  }

 private:
  Value held_[PerLane]{};
};

}  // namespace mnemo::grid
