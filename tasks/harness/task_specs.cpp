// The multiple-choice tasks as data: one JSON spec per task, read by the generic task in
// tasks/harness/multiple_choice.cpp. Prompts, choices and targets are lm-eval's YAML fields verbatim
// (lm_eval/tasks/<task>/*.yaml, cited per spec) over documents in the Hugging Face schema the importers build.
//
// Spec fields: task, version (lm-eval metadata.version; "Yaml" when the YAML has none), reference (the YAML),
// sources (tried in order; "optional": skipped when absent; "checksum": "required" (mismatch = Error) or "flag"
// (mismatch = matches_reference false); "labels": a second file for the piqa format), doc_to_text (template:
// {{path}}, {{a['b'][0]}}, {{x.strip()}}), doc_to_choice (a path to an array of strings, or a list of templates),
// doc_to_target (template; digits = choice index (+ target_offset), else the choice equal to it; with target_in,
// its index in that array), target_delimiter, metrics.
#include "tasks/harness/task_common.h"

namespace mnemo::harness {

const std::vector<const char*>& builtin_task_specs() {
  static const std::vector<const char*> specs = {
      R"JSON({
  "task": "piqa", "version": "1.0", "reference": "lm_eval/tasks/piqa/piqa.yaml",
  "sources": [{"file": "eval/piqa/valid.jsonl", "format": "piqa",
               "sha256": "93503cc97c679e459b065c3d13e848282e44b2a25213985bed3e5d458abef72d",
               "labels": {"file": "eval/piqa/valid-labels.lst",
                          "sha256": "b4192dc3a2a0363d9d60ccf79800cbbe2f32ebb17726efdde6970e0b8131bceb"},
               "matches_reference": true,
               "note": "PIQA validation (ybisk/ybisk.github.io); reproduces lm-eval's piqa requests exactly"}],
  "doc_to_text": "Question: {{goal}}\nAnswer:", "doc_to_choice": ["{{sol1}}", "{{sol2}}"],
  "doc_to_target": "{{label}}", "target_delimiter": " ", "metrics": ["acc", "acc_norm"]})JSON",

      R"JSON({
  "task": "arc_easy", "version": "1.0", "reference": "lm_eval/tasks/arc/arc_easy.yaml",
  "sources": [{"file": "eval/arc_easy.jsonl", "format": "arc_llmfoundry",
               "sha256": "d2d12e59543acf9a5ef6079634a72b30215e36c2fd4236fff3bc855d287b87f5",
               "matches_reference": false,
               "note": "llm-foundry copy of ARC-Easy test (4 choices for every item); differs from lm-eval's allenai/ai2_arc in at least one record: scores are not comparable exactly"}],
  "doc_to_text": "Question: {{question}}\nAnswer:", "doc_to_choice": "choices.text",
  "doc_to_target": "{{answerKey}}", "target_in": "choices.label", "target_delimiter": " ",
  "metrics": ["acc", "acc_norm"]})JSON",

      R"JSON({
  "task": "arc_challenge", "version": "1.0", "reference": "lm_eval/tasks/arc/arc_challenge.yaml",
  "sources": [{"file": "eval/arc_challenge.jsonl", "format": "arc_llmfoundry",
               "sha256": "1ae3aeedf1951d881cbd5c2e3a31e78a1993d251479afbe4cb413b6707244636",
               "matches_reference": false,
               "note": "llm-foundry copy of ARC-Challenge test (4 choices for every item); differs from lm-eval's allenai/ai2_arc in at least one record: scores are not comparable exactly"}],
  "doc_to_text": "Question: {{question}}\nAnswer:", "doc_to_choice": "choices.text",
  "doc_to_target": "{{answerKey}}", "target_in": "choices.label", "target_delimiter": " ",
  "metrics": ["acc", "acc_norm"]})JSON",

      R"JSON({
  "task": "openbookqa", "version": "1.0", "reference": "lm_eval/tasks/openbookqa/openbookqa.yaml",
  "sources": [{"file": "eval/openbook_qa.jsonl", "format": "openbookqa_llmfoundry",
               "sha256": "adb2e5c7f8db810ddad4d6b2bf53dcc86dcc545499f7aafcaf42a8e179476c09",
               "matches_reference": true,
               "note": "OpenBookQA main test (llm-foundry copy); reproduces lm-eval's openbookqa requests exactly"}],
  "doc_to_text": "{{question_stem}}", "doc_to_choice": "choices.text",
  "doc_to_target": "{{answerKey}}", "target_in": "choices.label", "target_delimiter": " ",
  "metrics": ["acc", "acc_norm"]})JSON",

      R"JSON({
  "task": "boolq", "version": "2.0", "reference": "lm_eval/tasks/super_glue/boolq/default.yaml",
  "sources": [{"file": "eval/boolq.jsonl", "format": "boolq_llmfoundry",
               "sha256": "454ff101e614370bb1807fe7ebbda6fdb57e794b9662cc1ccae211bf1ff626c8",
               "matches_reference": false,
               "note": "llm-foundry copy of BoolQ validation re-assembled into passage/question/label; its passages lack SuperGLUE's \"<title> -- \" prefix, so contexts differ from lm-eval's: scores are not comparable"}],
  "doc_to_text": "{{passage}}\nQuestion: {{question}}?\nAnswer:", "doc_to_choice": ["no", "yes"],
  "doc_to_target": "{{label}}", "target_delimiter": " ", "metrics": ["acc"]})JSON",

      R"JSON({
  "task": "social_iqa", "version": "0.0", "reference": "lm_eval/tasks/siqa/siqa.yaml",
  "sources": [{"file": "eval/siqa/dev.jsonl", "format": "siqa_commonbench",
               "sha256": "26cf304136c026b70ccaabcd6eec45afc116f4dc013818475bb7b34fe1b0f26d",
               "matches_reference": false,
               "note": "Social IQa dev (common-bench copy; gold = the first option equal to the answer text); not verified against lm-eval's lighteval/siqa copy"}],
  "doc_to_text": "Q: {{context}} {{question}}\nA:", "doc_to_choice": ["{{answerA}}", "{{answerB}}", "{{answerC}}"],
  "doc_to_target": "{{label}}", "target_offset": -1, "target_delimiter": " ", "metrics": ["acc"]})JSON",

      R"JSON({
  "task": "commonsense_qa", "version": "Yaml", "reference": "lm_eval/tasks/commonsense_qa/default.yaml",
  "sources": [{"file": "eval/commonsense_qa/validation.jsonl", "format": "jsonl",
               "sha256": "4c036e81eec3cb86477bc1b97c21c56aa17d92ab9f8537c855dc0cf724b05fe0",
               "matches_reference": true,
               "note": "unmodified dump of tau/commonsense_qa validation, the split lm-eval's commonsense_qa reads"}],
  "doc_to_text": "Question: {{ question.strip() }}\nA. {{choices['text'][0]}}\nB. {{choices['text'][1]}}\nC. {{choices['text'][2]}}\nD. {{choices['text'][3]}}\nE. {{choices['text'][4]}}\nAnswer:",
  "doc_to_choice": ["A", "B", "C", "D", "E"], "doc_to_target": "{{answerKey}}", "target_delimiter": " ",
  "metrics": ["acc"]})JSON",

      R"JSON({
  "task": "hellaswag", "version": "1.0", "reference": "lm_eval/tasks/hellaswag/hellaswag.yaml + utils.py",
  "sources": [{"file": "eval/hellaswag/hellaswag_val.jsonl", "format": "hellaswag_original", "optional": true,
               "checksum": "flag", "sha256": "0aa3b88843990f3f10a97b9575c94d7b71fb2205240ba04ae4884d9e9c992588",
               "matches_reference": true,
               "note": "original rowanz/hellaswag validation file, preprocessed as lm-eval's process_docs"},
              {"file": "eval/hellaswag/hellaswag_val_full.txt", "format": "hellaswag_text",
               "sha256": "d572539320eb2050e858ca34b495bbe2103e3b3f1391a9c3bcdf215b0bb93bd1",
               "matches_reference": false,
               "note": "text form (klosax/hellaswag_text_data) built from ctx, not ctx_a + \" \" + ctx_b.capitalize(): contexts are close to, not identical with, lm-eval's (e.g. \"... a roof. he\" for \"... a roof. He\"); supply eval/hellaswag/hellaswag_val.jsonl for exact parity"}],
  "doc_to_text": "{{query}}", "doc_to_choice": "choices", "doc_to_target": "{{label}}",
  "target_delimiter": " ", "metrics": ["acc", "acc_norm"]})JSON",
  };
  return specs;
}

}  // namespace mnemo::harness
