// `mnemo score --task TASK --predictions FILE.jsonl [--mode strict|substring]`: score predictions
// produced elsewhere with the task's own scorer (engine/evaluation/score.h) and print the metric as JSON.
// Each line: {"prediction": ..., <the target fields `mnemo generate` writes>}.
// `mnemo score --task T --samples samples_T.jsonl [--skip-malformed] [--cutting-context [--context-length N]
// [--answer-length N] [--tokenizer SPEC]] [--checkpoint RUN]`: re-score an lm-eval samples file (from `mnemo eval
// --tasks T --log-samples`) through the task's process_results, without the model (a token task's documents drawn
// with RUN's task parameters and seed).
#include <iostream>

#include "cli/commands/commands.h"
#include "engine/evaluation/score.h"

namespace mnemo::cli {

void add_score_command(CLI::App& app) {
  static std::string task, predictions, samples, mode = "strict";
  static SamplesScoreOptions so;
  auto* sub = app.add_subcommand("score", "Score predictions (JSONL with \"prediction\" and the generated target "
                                          "fields) with a task's scorer, or re-score an lm-eval samples file "
                                          "(--samples) without the model; prints the metrics as JSON");
  sub->add_option("--task", task,
                  "sniah_1|sniah_2|sniah_3|babilong_qa1..babilong_qa20 (--predictions), or an lm-eval task such as "
                  "piqa, winogrande, wikitext (--samples)")
      ->required();
  auto* pred_opt = sub->add_option("--predictions", predictions, "JSONL file, one prediction per line");
  auto* samples_opt = sub->add_option("--samples", samples,
                                      "samples_<task>.jsonl written by `mnemo eval --tasks T --log-samples`: each "
                                      "line's doc and arguments are checked against the task, its resps re-scored "
                                      "and the stored per-document metrics compared");
  auto* mode_opt = sub->add_option("--mode", mode, "BABILong scorer: strict (label sets, default) | substring");
  auto* skip_opt = sub->add_flag("--skip-malformed", so.skip_malformed,
                                 "--samples: read the task's data as `eval --skip-malformed` did");
  auto* cut_opt = sub->add_flag("--cutting-context", so.cutting_context,
                                "--samples, recall tasks: the evaluation cut contexts (eval --cutting-context)");
  auto* ctx_len_opt = sub->add_option("--context-length", so.context_length, "--cutting-context: as eval's (2048)");
  auto* ans_len_opt = sub->add_option("--answer-length", so.answer_length, "--cutting-context: as eval's (48)");
  auto* tok_opt = sub->add_option("--tokenizer", so.tokenizer,
                                  "--cutting-context: the evaluation's tokenizer (byte | byte:plain | FILE.model; "
                                  "default byte)");
  auto* ckpt_opt = sub->add_option("--checkpoint", so.checkpoint,
                                   "--samples of a token task (mqar, mad_*): the run eval --tasks scored (its task "
                                   "parameters and seed draw the documents)");
  sub->callback([pred_opt, samples_opt, mode_opt, skip_opt, cut_opt, ctx_len_opt, ans_len_opt, tok_opt, ckpt_opt] {
    if (pred_opt->count() == 0 && samples_opt->count() == 0)
      throw Error("score: --predictions is required (S-NIAH, BABILong predictions; or --samples FILE, an lm-eval "
                  "task's samples file)");
    if (pred_opt->count() > 0 && samples_opt->count() > 0)
      throw Error("score: --predictions and --samples exclude each other: give one of them");
    if (samples_opt->count() > 0) {
      if (mode_opt->count() > 0) throw Error("score: --mode goes with --predictions (BABILong's scorer)");
      if (!so.cutting_context)
        for (auto* opt : {ctx_len_opt, ans_len_opt, tok_opt})
          if (opt->count() > 0) throw Error("score: " + opt->get_name() + " goes with --cutting-context");
      std::cout << score_samples(task, samples, so).dump() << "\n";
      return;
    }
    for (auto* opt : {skip_opt, cut_opt, ctx_len_opt, ans_len_opt, tok_opt, ckpt_opt})
      if (opt->count() > 0) throw Error("score: " + opt->get_name() + " goes with --samples");
    std::cout << score_predictions(task, predictions, mode).dump() << "\n";
  });
}

}  // namespace mnemo::cli
