// Fuzz target: sweep files (`mnemo sweep --config`): the grid expansion (engine/sweep) and the resolution of
// every cell, as run_sweep does before it starts a worker. Seeds: configs/*.json (scripts/fuzz).
#include "engine/config/run_config.h"
#include "engine/tools/sweep.h"
#include "fuzz_common.h"

using namespace mnemo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mnemo_fuzz::guarded([&] {
    const json sweep = read_json_file(mnemo_fuzz::write_scratch("sweep.json", data, size));
    const auto cells = expand_sweep(sweep);
    // Every cell is resolved before a sweep starts; the first 64 keep one input's time bounded.
    for (size_t i = 0; i < cells.size() && i < 64; ++i) (void)config_hash(resolve_run_config(cells[i]));
  });
}
