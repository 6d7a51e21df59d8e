// The host side of block_grid.cuh: runs a block function over a grid, one block after another, with the
// block's dynamic shared memory as a zero-filled host buffer of the kernel's size. By default a block runs as one lane
// standing for all its threads; inside a HostLanesScope it runs as several lanes (threads that take turns, one phase
// at a time, in lane order or in reverse), which is how the CPU tests look for data races between the threads of a
// phase (tests/test_block_lanes.cpp).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/kernels/block_grid.cuh"

namespace mnemo::grid {

// Lanes per block of the host grid and the order in which they take each phase.
struct HostLanes {
  int count = 1;
  bool reverse = false;
};
inline HostLanes& host_lanes() {
  static HostLanes lanes;
  return lanes;
}
class HostLanesScope {
 public:
  HostLanesScope(int count, bool reverse) : previous_(host_lanes()) { host_lanes() = HostLanes{count, reverse}; }
  ~HostLanesScope() { host_lanes() = previous_; }
  HostLanesScope(const HostLanesScope&) = delete;
  HostLanesScope& operator=(const HostLanesScope&) = delete;

 private:
  HostLanes previous_;
};

// The turns of one block's lanes: exactly one lane runs at a time; a barrier (or the end of the block function)
// hands the turn to the next lane of the phase's order, and the last lane's hand-over starts the next phase.
class LaneTurns {
 public:
  explicit LaneTurns(HostLanes lanes) : lanes_(lanes) {}
  void wait_turn(int lane) {
    std::unique_lock<std::mutex> lock(mutex_);
    turn_.wait(lock, [&] { return current() == lane; });
  }
  void pass() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      position_ = (position_ + 1) % lanes_.count;
    }
    turn_.notify_all();
  }

 private:
  int current() const { return lanes_.reverse ? lanes_.count - 1 - position_ : position_; }
  HostLanes lanes_;
  int position_ = 0;
  std::mutex mutex_;
  std::condition_variable turn_;
};

// run(Lanes) once per lane, the lanes taking turns (every lane of a block must reach the same barriers, as on the
// device).
template <class Run>
void run_block_lanes(HostLanes lanes, Run&& run) {
  LaneTurns turns(lanes);
  struct Context {
    LaneTurns* turns;
    int lane;
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(lanes.count));
  for (int lane = 0; lane < lanes.count; ++lane)
    threads.emplace_back([&, lane] {
      Context context{&turns, lane};
      host_barrier::current = {[](void* c) {
                                 auto* x = static_cast<Context*>(c);
                                 x->turns->pass();
                                 x->turns->wait_turn(x->lane);
                               },
                               &context};
      turns.wait_turn(lane);
      run(Lanes{lane, lanes.count});
      host_barrier::current = {nullptr, nullptr};
      turns.pass();
    });
  for (auto& t : threads) t.join();
}

// body(block_index, shared_base, Lanes) for block_index in [0, blocks).
template <class Body>
void run_on_host(int64_t blocks, std::size_t shared_bytes_per_block, Body&& body) {
  const HostLanes lanes = host_lanes();
  // 16-byte aligned storage (SharedArena slices are 16-byte multiples from the base).
  std::vector<std::max_align_t> shared((shared_bytes_per_block + sizeof(std::max_align_t) - 1) /
                                           sizeof(std::max_align_t) + 1);
  for (int64_t block = 0; block < blocks; ++block) {
    std::fill(shared.begin(), shared.end(), std::max_align_t{});
    void* base = static_cast<void*>(shared.data());
    if (lanes.count <= 1) {
      body(block, base, Lanes{0, 1});
    } else {
      run_block_lanes(lanes, [&](Lanes l) { body(block, base, l); });
    }
  }
}

}  // namespace mnemo::grid
