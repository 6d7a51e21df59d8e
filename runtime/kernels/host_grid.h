// The host side of block_grid.cuh: runs a block function over a grid, one block after another, with the
// block's dynamic shared memory as a zero-filled host buffer of the kernel's size.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/kernels/block_grid.cuh"

namespace mnemo::grid {

// body(block_index, shared_base, Lanes) for block_index in [0, blocks).
template <class Body>
void run_on_host(int64_t blocks, std::size_t shared_bytes_per_block, Body&& body) {
  // 16-byte aligned storage (SharedArena slices are 16-byte multiples from the base).
  std::vector<std::max_align_t> shared((shared_bytes_per_block + sizeof(std::max_align_t) - 1) /
                                           sizeof(std::max_align_t) + 1);
  for (int64_t block = 0; block < blocks; ++block) {
    std::fill(shared.begin(), shared.end(), std::max_align_t{});
    body(block, static_cast<void*>(shared.data()), Lanes{0, 1});
  }
}

}  // namespace mnemo::grid
