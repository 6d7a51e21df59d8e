// Fuzz target: kernel oracle fixtures (`mnemo check-kernel FILE`, runtime/ops/fixture): parsing and validation
// of a fixture file and the tolerance look-up. Seeds: ../shared/fixtures/kernels/*.json (scripts/fuzz).
#include "fuzz_common.h"
#include "runtime/ops/fixture.h"

using namespace mnemo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mnemo_fuzz::guarded([&] {
    const Fixture f = load_fixture(mnemo_fuzz::write_scratch("fixture.json", data, size));
    for (const auto& [name, tensor] : f.outputs) {
      (void)fixture_tolerance(f, name, "float64");
      (void)fixture_tolerance(f, name, "float32");
    }
  });
}
