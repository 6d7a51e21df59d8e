// Fuzz target: the run configuration — a config file (`mnemo train --config`) resolved against the model
// and task registries (engine/run_config), and `--set key=value` lines (core/config_values).
// Input: byte 0 even -> the rest is a config file; odd -> the rest is `--set` lines applied over a valid
// base config. Seeds: configs/*.json cells and shipped `--set` examples (scripts/fuzz).
#include <sstream>

#include "core/config_values.h"
#include "engine/config/run_config.h"
#include "fuzz_common.h"

using namespace mnemo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool set_lines = data[0] & 1;
  return mnemo_fuzz::guarded([&] {
    json user;
    if (set_lines) {
      std::vector<std::string> pairs;
      std::istringstream in(mnemo_fuzz::as_string(data + 1, size - 1));
      for (std::string line; std::getline(in, line);) pairs.push_back(line);
      user = {{"model", "gated_deltanet"}, {"task", "mqar"}};
      apply_overrides(user, pairs);
    } else {
      user = read_json_file(mnemo_fuzz::write_scratch("config.json", data + 1, size - 1));
    }
    const json resolved = resolve_run_config(user);
    (void)config_hash(resolved);
    (void)task_params_of(resolved);
  });
}
