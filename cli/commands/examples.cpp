// One short example per command, shown at the end of its --help (and of `mnemo` with no arguments). Each line
// works as pasted from the repository's root, in the order of this table: `train` writes out/runs/example and the
// default results database, which `eval`, `export`, `runs` and `report` then read. tests/test_cli_help.cpp
// runs the cheap ones in that order and checks the others' options against their command's help.
#include <map>

#include "cli/commands/commands.h"

namespace mnemo::cli {

const std::vector<std::pair<std::string, std::vector<std::string>>>& command_examples() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> examples = {
      {"", {"mnemo quickstart --jobs 2",
            "mnemo train --model transformer --task mqar --set vocab_size=256 --set seq_len=64 --set steps=100 "
            "--out out/runs/example"}},
      {"models", {"mnemo models"}},
      {"tasks", {"mnemo tasks"}},
      {"keys", {"mnemo keys"}},
      {"generate", {"mnemo generate mqar --n 4 --seed 0 --out out/mqar_examples.jsonl"}},
      {"train",
       {"mnemo train --model transformer --task mqar --set vocab_size=256 --set seq_len=64 --set steps=100 "
        "--set d_model=32 --out out/runs/example"}},
      {"eval", {"mnemo eval --checkpoint out/runs/example --task mqar --n 64"}},
      {"export",
       {"mnemo export --checkpoint out/runs/example --format safetensors --out out/example",
        "mnemo export --checkpoint out/runs/example --format hf --out out/example-hf"}},
      {"runs", {"mnemo runs"}},
      {"report", {"mnemo report --db out/mnemo.sqlite --out out/report"}},
      {"tokenizer", {"mnemo tokenizer encode byte 'Hello, world'"}},
      {"tokenizer info", {"mnemo tokenizer info byte"}},
      {"tokenizer encode", {"mnemo tokenizer encode byte 'Hello, world'"}},
      {"run", {"mnemo run learnability --setting 1 --memory linear --d 16 --seq-len 64 --seeds 1"}},
      {"run learnability", {"mnemo run learnability --setting 1 --memory linear --d 16 --seq-len 64 --seeds 1"}},
      {"bench", {"mnemo bench --model gated_deltanet --seq-lens 256,512 --mode fwd --no-db"}},
      {"check-kernel", {"mnemo check-kernel ../shared/fixtures/kernels/delta_rule__seed1__T16.json"}},
      {"sweep", {"mnemo sweep --config configs/mqar_transformer.json --jobs 2"}},
      {"quickstart", {"mnemo quickstart --jobs 2 --skip-lm"}},
      {"score", {"mnemo score --task mqar --predictions out/predictions.jsonl"}},
      {"tokenizer train",
       {"mnemo tokenizer train --input corpus.txt --vocab-size 8000 --model-type bpe --out out/tokenizer/bpe8k"}},
      {"import-fla", {"mnemo import-fla --model-dir fla-hub/gla-340M --out out/runs/gla-340M --task lm"}},
      {"db", {"mnemo db merge out/mnemo.sqlite out/shard-0.sqlite out/shard-1.sqlite"}},
      {"db merge", {"mnemo db merge out/mnemo.sqlite out/shard-0.sqlite out/shard-1.sqlite"}},
      {"data", {"mnemo data fetch recall --tasks swde,fda"}},
      {"data fetch", {"mnemo data fetch recall --tasks swde,fda"}},
      {"data fetch recall", {"mnemo data fetch recall --tasks swde,fda"}},
      {"hub", {"mnemo hub download fla-hub/gla-1.3B-100B"}},
      {"hub download", {"mnemo hub download fla-hub/gla-1.3B-100B --include '*.json' --include '*.safetensors'"}},
  };
  return examples;
}

namespace {
std::string path_of(const CLI::App* app) {
  std::string path;
  for (const CLI::App* a = app; a->get_parent(); a = a->get_parent())
    path = a->get_name() + (path.empty() ? "" : " " + path);
  return path;
}

void add_examples(CLI::App* app, const std::map<std::string, std::vector<std::string>>& by_path) {
  auto it = by_path.find(path_of(app));
  if (it != by_path.end()) {
    std::string text = it->second.size() == 1 ? "\nExample:\n" : "\nExamples:\n";
    for (const auto& line : it->second) text += "  " + line + "\n";
    app->footer(text + app->get_footer());
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App* s) { return !s->get_name().empty(); }))
    add_examples(sub, by_path);
}
}  // namespace

void add_command_examples(CLI::App& app) {
  std::map<std::string, std::vector<std::string>> by_path(command_examples().begin(), command_examples().end());
  add_examples(&app, by_path);
}

}  // namespace mnemo::cli
