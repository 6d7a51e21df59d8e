// `mnemo eval --checkpoint DIR --task NAME [--param value ...] [--n N] [--seed S] [--db FILE] [--keep-previous]`
// `mnemo eval --checkpoint DIR --tasks piqa,arc_easy,...|commonsense [--limit N] [--batch-size B] [--max-length L]
//             [--log-samples] [--output-path DIR] [--tokenizer SPEC] [--db FILE]`   (lm-eval's conventions)
// `mnemo eval --tasks T --requests-only [--limit N] [--output-path DIR]`             (no checkpoint)
// Recall tasks (--tasks recall): [--cutting-context [--context-length 2048] [--answer-length 48]]
// Damaged data files (--tasks): [--skip-malformed] skips malformed records (listed under the table) instead of failing
#include <cstdlib>
#include <iostream>

#include "cli/commands/commands.h"
#include "core/defaults.h"
#include "core/signals.h"
#include "engine/evaluation/evaluate.h"
#include "engine/evaluation/harness_eval.h"
#include "engine/io/hub.h"

namespace mnemo::cli {

namespace {
// Under the results table: per task, the malformed records skipped (--skip-malformed) and the data files read
// although their SHA-256 differs from the reference copy's. "" when there are none.
std::string malformed_report(const json& out) {
  std::string text;
  const json& malformed = out.at("malformed");
  for (auto it = malformed.begin(); it != malformed.end(); ++it) {
    const json& records = it.value().at("records");
    text += it.key() + ": " + std::to_string(records.size()) + " malformed record" + (records.size() == 1 ? "" : "s") +
            " skipped:";
    size_t shown = 0;
    for (const auto& r : records) {
      if (shown++ == 10) {
        text += " ... and " + std::to_string(records.size() - 10) + " more (results.json lists them all)";
        break;
      }
      text += std::string(shown > 1 ? ", " : " ") + r.at("where").get<std::string>() + " (" +
              r.at("reason").get<std::string>() + ")";
    }
    text += "\n";
  }
  const json& warnings = out.at("data_warnings");
  for (auto it = warnings.begin(); it != warnings.end(); ++it)
    for (const auto& note : it.value())
      text += it.key() + ": data file " + note.get<std::string>() + " (scores not comparable)\n";
  return text;
}
}  // namespace

void add_eval_command(CLI::App& app) {
  static EvalRequest a;
  static std::string tasks, tokenizer, output_path;
  static int64_t limit = 0, max_length = 0, context_length = 2048, answer_length = 48;
  static bool log_samples = false, requests_only = false, cutting_context = false, skip_malformed = false;
  auto* sub = app.add_subcommand("eval",
                                 "Evaluate a checkpoint: --task NAME (a mnemo task; task parameters and evaluation "
                                 "options are flags, e.g. --seq-len 128 --num-kv-pairs 8; S-NIAH: --lengths 1024,2048 "
                                 "--depths 0,50,100) or --tasks piqa,arc_easy,...|commonsense (zero-shot, lm-eval's "
                                 "requests and metrics)");
  sub->add_option("--checkpoint", a.checkpoint,
                  "Run directory, its checkpoint/ folder, an export (PATH.safetensors, or a folder holding "
                  "model.safetensors + model.json; see `mnemo export`), a Hugging Face folder of an fla model "
                  "(config.json + model.safetensors + tokenizer.json), or hf:OWNER/NAME[@REVISION] (downloaded into "
                  "the Hugging Face cache, see `mnemo hub download`); not with --requests-only");
  sub->add_option("--task", a.task, "Task name (default: the task the model was trained on)");
  auto* tasks_opt = sub->add_option("--tasks", tasks,
                                    "Tasks, comma separated: lm-eval tasks or groups (piqa, commonsense, ...) and token "
                                    "tasks (mqar, mad_*: 1000 test examples drawn with the run's seed, the "
                                    "checkpoint's task parameters when it trained on the task)");
  auto* n_opt = sub->add_option("--n", a.n, "Examples to evaluate (generation tasks: samples per cell)")
                    ->check(CLI::PositiveNumber);
  auto* seed_opt = sub->add_option("--seed", a.seed, "Base seed of the test examples (default: the run's)");
  auto* batch_opt = sub->add_option("--batch-size", a.batch_size,
                                    "Evaluation batch size (token tasks such as mqar: default 64; lm-eval tasks: default 1 on the CPU, where "
                                    "it is the fastest, 32 on CUDA)")
                        ->check(CLI::PositiveNumber);
  auto* limit_opt = sub->add_option("--limit", limit, "--tasks: the first N documents of each task (N >= 1)");
  auto* max_len_opt = sub->add_option("--max-length", max_length,
                                      "--tasks: the model's context in tokens (default: the checkpoint's seq_len, "
                                      "else 2048); longer requests keep their last tokens");
  sub->add_flag("--log-samples", log_samples, "--tasks: write samples_<task>.jsonl (lm-eval's samples schema)");
  auto* out_opt = sub->add_option("--output-path", output_path,
                                  "--tasks: folder of results.json and samples (default out/eval/<run folder>)");
  sub->add_flag("--requests-only", requests_only,
                "--tasks: write <task>.jsonl with the requests (doc_id, arguments) and stop; no checkpoint needed");
  auto* cut_opt = sub->add_flag("--cutting-context", cutting_context,
                                "--tasks, recall tasks: cut each context to --context-length minus --answer-length "
                                "tokens around its answer first (the Based lm-eval fork's --cutting_context; MoM's "
                                "\"inputs truncated to 2K\")");
  auto* ctx_len_opt = sub->add_option("--context-length", context_length,
                                      "--cutting-context: the context budget in tokens (default 2048, MoM's)");
  auto* ans_len_opt = sub->add_option("--answer-length", answer_length,
                                      "--cutting-context: tokens of the budget left for the answer (default 48, MoM's)");
  auto* skip_opt = sub->add_flag("--skip-malformed", skip_malformed,
                                 "--tasks: skip a malformed record of a task's data file (counted, listed under the "
                                 "table and in results.json; doc_ids keep their gaps) instead of stopping at it; a "
                                 "data file whose SHA-256 differs from the reference copy's is then read, its scores "
                                 "marked not comparable");
  auto* tok_opt = sub->add_option("--tokenizer", tokenizer,
                                  "byte | byte:plain | a SentencePiece .model (default: the checkpoint's)");
  sub->add_flag("--allow-other-tokenizer", a.allow_other_tokenizer,
                "Evaluate with a --tokenizer other than the one the checkpoint records (refused otherwise); the "
                "evals rows then name the tokenizer in their cell");
  sub->add_option("--db", a.db, std::string("Results database (default ") + kDefaultDbPath + ")");
  sub->add_option("--device", a.device, "cpu | cuda | auto");
  sub->add_flag("--keep-previous", a.keep_previous,
                "Keep the earlier rows of cells evaluated before (the new rows say how many in "
                "details_json.kept_previous); by default a cell's new value replaces them");
  sub->allow_extras();
  sub->callback([sub, seed_opt, n_opt, batch_opt, limit_opt, max_len_opt, out_opt, tok_opt, cut_opt, ctx_len_opt,
                 ans_len_opt, skip_opt, tasks_opt] {
    const auto log = [](const std::string& line) { std::cerr << line << "\n"; };
    if (tasks_opt->count() > 0 && tasks.find_first_not_of(" ,") == std::string::npos)
      throw Error("eval: --tasks '" + tasks + "' names no task; give lm-eval tasks, e.g. --tasks piqa,arc_easy, or a "
                  "group such as --tasks commonsense");
    if (requests_only && !a.checkpoint.empty())
      throw Error("eval: --requests-only writes the requests without a model, so --checkpoint " + a.checkpoint +
                  " is not used; leave out one of the two");
    // SIGINT / SIGTERM: the evaluation stops at the next batch or generation and writes nothing (every file and the
    // database rows are written once all tasks are scored); exit 128 + signal, as `train` does.
    install_stop_handlers();
    const auto stopped = [](const std::string& what) {
      std::cout.flush();
      std::cerr << "mnemo: interrupted by " << stop_signal_name() << ": " << what << "\n";
      std::cerr.flush();
      std::exit(128 + stop_signal());
    };
    if (is_hub_model_spec(a.checkpoint)) a.checkpoint = hub_model_snapshot(a.checkpoint, &std::cerr);
    if (tasks_opt->count() == 0) {
      for (auto* opt : {limit_opt, max_len_opt, out_opt, cut_opt, ctx_len_opt, ans_len_opt, skip_opt})
        if (opt->count() > 0)
          throw Error("eval: " + opt->get_name() + " goes with --tasks (the lm-eval suite); --task T takes --n N");
      if (log_samples || requests_only)
        throw Error(std::string("eval: ") + (log_samples ? "--log-samples" : "--requests-only") +
                    " goes with --tasks (the lm-eval suite)");
      if (a.checkpoint.empty()) throw Error("eval: --checkpoint DIR is required (or --tasks T --requests-only)");
      a.seed_given = seed_opt->count() > 0;
      a.n_given = n_opt->count() > 0;
      a.params = extras_to_params(sub->remaining());
      if (tok_opt->count() > 0) a.params["tokenizer"] = tokenizer;  // a task parameter of the text tasks
      json out;
      try {
        out = evaluate_checkpoint(a, log);
      } catch (const Error&) {
        if (stop_requested()) stopped("eval --task stopped before it finished; nothing recorded");
        throw;
      }
      std::cout << out.dump() << "\n";
      return;
    }
    if (!a.task.empty()) throw Error("eval: give --task (one mnemo task) or --tasks (lm-eval tasks), not both");
    if (n_opt->count() > 0 || seed_opt->count() > 0)
      throw Error("eval: --n and --seed go with --task; --tasks takes --limit N (the first N documents)");
    if (!sub->remaining().empty())
      throw Error("eval --tasks: unknown option '" + sub->remaining().front() + "'");
    HarnessEvalRequest h;
    h.checkpoint = a.checkpoint;
    h.tokenizer = tokenizer;
    h.db = a.db;
    h.device = a.device;
    h.keep_previous = a.keep_previous;
    h.allow_other_tokenizer = a.allow_other_tokenizer;
    if (max_len_opt->count() > 0) h.max_length = max_length;
    h.options.tasks = {tasks};
    if (limit_opt->count() > 0) h.options.limit = limit;
    if (batch_opt->count() > 0) h.batch_size = a.batch_size;
    h.options.log_samples = log_samples;
    h.options.output_path = output_path;
    h.options.requests_only = requests_only;
    if (!cutting_context && (ctx_len_opt->count() > 0 || ans_len_opt->count() > 0))
      throw Error("eval: --context-length and --answer-length go with --cutting-context");
    h.options.cutting_context = cutting_context;
    h.options.context_length = context_length;
    h.options.answer_length = answer_length;
    h.options.skip_malformed = skip_malformed;
    json out;
    try {
      out = evaluate_harness(h, log);
    } catch (const Error&) {
      if (stop_requested())
        stopped("eval --tasks stopped before every task was scored; nothing written (no results.json, samples or "
                "database rows); the same command evaluates again from the start");
      throw;
    }
    // Skipped documents (the recall tasks' rule under --cutting-context) are never silent.
    std::string skipped;
    for (auto it = out.at("skipped").begin(); it != out.at("skipped").end(); ++it)
      if (it.value().get<int64_t>() > 0) skipped += (skipped.empty() ? "" : ", ") + it.key() + " " + it.value().dump();
    if (requests_only) {
      for (const auto& f : out.at("files")) std::cout << "wrote " << f.get<std::string>() << "\n";
      if (!skipped.empty()) std::cout << "documents skipped (no requests): " << skipped << "\n";
      std::cout << malformed_report(out);
      return;
    }
    const json& cfg = out.at("results").at("config");
    bool has_token_task = false;
    for (const auto& [name, task_config] : out.at("results").at("configs").items())
      has_token_task = has_token_task || task_config.value("output_type", "") == "token_predictions";
    std::cout << cfg.value("model", "") << " (checkpoint=" << cfg.value("checkpoint", "") << "), limit: "
              << cfg.at("limit").dump() << ", num_fewshot: 0, batch_size: " << cfg.at("batch_size").dump()
              << (has_token_task ? " (token tasks: " + cfg.at("token_batch_size").dump() + ")" : std::string())
              << ", max_length: " << cfg.at("max_length").dump() << ", add_bos: " << cfg.at("add_bos").dump()
              << ", tokenizer: " << (cfg.at("tokenizer").is_string() ? cfg.at("tokenizer").get<std::string>() : "none")
              << (cutting_context ? ", cutting_context: context_length " + std::to_string(context_length) +
                                        ", answer_length " + std::to_string(answer_length)
                                  : std::string())
              << "\n"
              << out.at("table").get<std::string>();
    if (!skipped.empty())
      std::cout << "documents skipped (an answer string is empty or one character long, truncate_context's rule; "
                   "not scored): " << skipped << "\n";
    std::cout << malformed_report(out);
    for (const auto& f : out.at("files")) std::cout << "wrote " << f.get<std::string>() << "\n";
  });
}

}  // namespace mnemo::cli
