// Fuzz target: safetensors files (`mnemo import-fla` reads other people's weights; `mnemo export` writes
// them): header length, JSON header, dtypes, shapes against byte ranges, then every tensor read
// (engine/safetensors). Seeds: files written by `mnemo export` of a tiny checkpoint (scripts/fuzz).
#include "engine/io/safetensors.h"
#include "fuzz_common.h"

using namespace mnemo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mnemo_fuzz::guarded([&] {
    SafetensorsFile file(mnemo_fuzz::write_scratch("model.safetensors", data, size));
    for (const auto& [name, tensor] : file.load_all()) (void)tensor.sum();
  });
}
