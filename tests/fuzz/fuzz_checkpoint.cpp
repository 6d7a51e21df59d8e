// Fuzz target: checkpoint metadata — trainer.json (resume state; also how a complete checkpoint among
// checkpoint/.tmp/.old is recognised) and model.json (engine/checkpoint). Input: byte 0 even -> the rest is
// trainer.json, odd -> model.json, in a checkpoint folder whose other files are present.
#include "engine/io/checkpoint.h"
#include "fuzz_common.h"

using namespace mnemo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string run = [] {
    const auto dir = mnemo_fuzz::scratch_dir() / "run";
    const std::string empty = "{}";
    mnemo_fuzz::write_scratch("run/checkpoint/config.json", reinterpret_cast<const uint8_t*>(empty.data()), 2);
    mnemo_fuzz::write_scratch("run/checkpoint/model.pt", nullptr, 0);
    return dir.string();
  }();
  const bool trainer = !(data[0] & 1);
  const std::string name = trainer ? "run/checkpoint/trainer.json" : "run/checkpoint/model.json";
  mnemo_fuzz::write_scratch(name, data + 1, size - 1);
  return mnemo_fuzz::guarded([&] {
    if (trainer) {
      (void)newest_complete_checkpoint(run);
      (void)load_trainer_state(run);
    } else {
      (void)read_model_meta(run + "/checkpoint");
    }
  });
}
