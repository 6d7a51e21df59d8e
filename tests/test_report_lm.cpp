// `mnemo report`, language-modelling section: runs table, scaling / curve / extrapolation figures and
// the ranking against the papers' numbers, over a hand-built results database.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/tools/report_catalog.h"
#include "reports/rank_stats.h"
#include "reports/report.h"
#include "file_util.h"
#include "test_util.h"

using namespace mnemo;
using mnemo::test::slurp;
namespace fs = std::filesystem;

namespace {

bool non_empty_file(const fs::path& p) { return fs::exists(p) && fs::file_size(p) > 0; }

struct LmSpec {
  std::string model, size;
  int layers, d;
  int64_t params;
  double final_ppl;
  bool summary = true;  // false: no summary rows (the section falls back to the val curve)
  std::string tokenizer = "byte";
};

// 2 families x 2 sizes, context 256, byte tokenizer; val ppl at steps 100 and 200 (the second is
// final), 8192 tokens per step. Returns run ids in the order of `specs`.
std::vector<int64_t> fill_lm_runs(ResultsDB& db, const std::vector<LmSpec>& specs) {
  std::vector<int64_t> ids;
  for (const LmSpec& s : specs) {
    RunInfo r;
    r.model = s.model;
    r.task = "lm";
    json cfg = {{"model", s.model},     {"task", "lm"},        {"size", s.size},
                {"d_model", s.d},       {"n_layers", s.layers}, {"n_heads", 4},
                {"seq_len", 256},       {"batch_size", 32},    {"grad_accum", 1},
                {"steps", 200},         {"corpus", "corpus/gutenberg"}, {"tokenizer", s.tokenizer},
                {"vocab_size", 256},    {"lr", 1e-3}};
    r.config_json = cfg.dump();
    r.config_hash = s.model + s.size + s.tokenizer;
    r.n_params = s.params;
    int64_t id = db.create_run(r);
    std::vector<MetricRow> rows;
    for (int64_t step : {100, 200}) {
      double ppl = step == 200 ? s.final_ppl : s.final_ppl * 1.5;
      double tokens = step * 8192.0;
      rows.push_back({id, step, "train", "loss", std::log(ppl) + 0.1, step * 0.1});
      rows.push_back({id, step, "train", "tokens", tokens, step * 0.1});
      rows.push_back({id, step, "val", "loss", std::log(ppl), step * 0.1});
      rows.push_back({id, step, "val", "ppl", ppl, step * 0.1});
      rows.push_back({id, step, "val", "bpb", std::log2(ppl), step * 0.1});
      rows.push_back({id, step, "val", "tokens", tokens, step * 0.1});
    }
    for (auto [name, value] : std::vector<std::pair<std::string, double>>{
             {"wall_s", 20.0},
             {"tokens_per_s", 12345.0},
             {"train_tokens", 1638400.0},
             {"flops", 6.0 * s.params * 1638400.0},
             {"best_val_ppl", s.final_ppl - 0.5},
             {"final_val_ppl", s.final_ppl},
             {"final_val_bpb", std::log2(s.final_ppl)}})
      if (s.summary) rows.push_back({id, 200, "summary", name, value, 20.0});
    db.add_metrics(rows);
    db.set_run_last_step(id, 200);
    db.set_run_status(id, "completed");
    ids.push_back(id);
  }
  return ids;
}

// lm_ppl rows at lengths 256..1024 plus 4 position buckets of 1024 (run_id 0: tied by checkpoint).
void add_extrapolation(ResultsDB& db, int64_t run_id, const std::string& model, double base) {
  std::vector<EvalRow> rows;
  auto row = [&](const std::string& metric, const json& setting, double value) {
    EvalRow e;
    e.run_id = run_id;
    e.model = model;
    e.task = "lm_ppl";
    e.metric = metric;
    e.setting_json = setting.dump();
    e.checkpoint = "/runs/" + model + "/ckpt_200.pt";
    e.value = value;
    e.n = 1000;
    rows.push_back(e);
  };
  for (int64_t L : {256, 512, 1024}) {
    json s = {{"length", L}, {"corpus", "gutenberg-val"}, {"train_seq_len", 256}};
    row("ppl", s, base * L / 256.0);
    row("bpb", s, std::log2(base * L / 256.0));
  }
  for (int64_t b = 0; b < 4; ++b)
    row("ppl_bucket",
        {{"length", 1024}, {"bucket_start", b * 256}, {"bucket_end", (b + 1) * 256}, {"corpus", "gutenberg-val"},
         {"train_seq_len", 256}},
        base * (b + 1));
  db.put_evals(rows);
}

}  // namespace

TEST_CASE("report: Kendall tau-b", "[report]") {
  CHECK(kendall_tau_b({1, 2, 3, 4, 5}, {3, 1, 2, 5, 4}) == Approx(0.4));
  CHECK(kendall_tau_b({1, 2, 2, 3}, {1, 3, 2, 4}) == Approx(0.9128709291752769));  // scipy, ties in x
  CHECK(kendall_tau_b({1, 2, 3}, {3, 2, 1}) == Approx(-1.0));
  CHECK(std::isnan(kendall_tau_b({1}, {1})));
  CHECK(std::isnan(kendall_tau_b({1, 1}, {1, 2})));
}

TEST_CASE("report: language-modelling section from a hand-built database", "[report]") {
  fs::path dir = test::temp_dir("report_lm");
  ResultsDB db((dir / "r.sqlite").string());
  // gated_deltanet beats transformer at both sizes: the papers' order (340M: 27.01 < 31.52).
  auto ids = fill_lm_runs(db, {{"transformer", "tiny", 2, 128, 1000000, 60.0},
                               {"transformer", "small", 6, 256, 5000000, 40.0},
                               {"gated_deltanet", "tiny", 2, 128, 1100000, 55.0},
                               {"gated_deltanet", "small", 6, 256, 5200000, 35.0}});
  add_extrapolation(db, ids[1], "transformer", 40.0);
  add_extrapolation(db, 0, "gated_deltanet", 35.0);
  std::string out = (dir / "report").string();
  std::string md = slurp(write_report(db, out, report_catalog()));

  size_t lm = md.find("## Language modelling"), next = md.find("\n## ", lm + 1);
  REQUIRE(lm != std::string::npos);
  std::string text = md.substr(lm, next == std::string::npos ? std::string::npos : next - lm);

  // Runs table: the numbers of the transformer small run.
  CHECK(text.find("| " + std::to_string(ids[1]) +
                  " | transformer | small | 5.00M | 6×256 | 256 | 1.64M | byte | corpus/gutenberg | 200 | 40.00 | "
                  "5.322 | 39.50 | 12.3K | completed |") != std::string::npos);
  CHECK(text.find("FLOPs = 6·N·D + 3·D·Σ_layers f_mixer(T)") != std::string::npos);

  // Figures: scaling, curves and extrapolation, linked and rendered.
  fs::path figures = fs::path(out) / "figures";
  for (std::string name : {"lm_ppl_vs_params", "lm_ppl_vs_flops", "lm_val_ppl_vs_tokens", "lm_extrapolation_length",
                           "lm_extrapolation_buckets"}) {
    CHECK(text.find("figures/" + name + ".png") != std::string::npos);
    CHECK(non_empty_file(figures / (name + ".png")));
    CHECK(non_empty_file(figures / (name + ".svg")));
  }
  std::string script = slurp(figures / "data" / "lm_extrapolation_length.gp");
  CHECK(script.find("set logscale x 2") != std::string::npos);
  CHECK(script.find("title 'training context 256'") != std::string::npos);
  CHECK(slurp(figures / "data" / "lm_ppl_vs_params.gp").find("title 'gated_deltanet'") != std::string::npos);

  // Extrapolation table: the run-tied row by family and size, the checkpoint-tied one by model @ file.
  CHECK(text.find("| transformer small (#" + std::to_string(ids[1]) + ") | 256 | 40.00 | 80.00 | 160.00 |") !=
        std::string::npos);
  CHECK(text.find("| gated_deltanet @ ckpt_200.pt | 256 | 35.00 | 70.00 | 140.00 |") != std::string::npos);

  // Papers' rows (copied, separate columns), the budgets and the ranking at our largest size.
  CHECK(text.find("| gated_deltanet | Gated DeltaNet | 27.01 | 30.94 | Titans T1 |") != std::string::npos);
  CHECK(text.find("| transformer | Transformer++ | 26.88 | 76.46 | MoM T3 |") != std::string::npos);
  CHECK(text.find("| papers | 340.00M | 15.00B | FineWeb-Edu") != std::string::npos);
  CHECK(text.find("ours (size small, runs #") != std::string::npos);
  CHECK(text.find("not comparable in absolute terms") != std::string::npos);
  CHECK(text.find("Kendall τ-b between the paper's ranking and ours (340M/15B): **1.000** (n = 2 families, "
                  "size small") != std::string::npos);
  CHECK(text.find("Kendall τ-b between the paper's ranking and ours (760M/30B): **1.000**") != std::string::npos);
  CHECK(text.find("| gated_deltanet | 1 | 27.01 | 1 | 35.00 (#") != std::string::npos);
}

TEST_CASE("report: many LM runs, a second corpus group and runs without summaries", "[report]") {
  fs::path dir = test::temp_dir("report_lm_many");
  ResultsDB db((dir / "r.sqlite").string());
  // Ours = the paper's 340M Wiki. ppl + 10, except gla and deltanet swapped: 1 discordant pair of 45.
  std::vector<LmSpec> specs;
  for (auto [model, wiki] : std::vector<std::pair<std::string, double>>{
           {"transformer", 31.52}, {"retnet", 32.50}, {"gla", 28.65}, {"deltanet", 28.51}, {"gated_deltanet", 27.01},
           {"titans_lmm", 26.18}, {"moneta", 26.19}, {"yaad", 26.61}, {"memora", 27.16}, {"atlas", 25.88},
           {"swa", 30.0}})
    specs.push_back({model, "tiny", 2, 128, 1000000, wiki + 10, model != "atlas"});
  specs.push_back({"transformer", "tiny", 2, 128, 1000000, 20.0, true, "sp-bpe:4096"});
  auto ids = fill_lm_runs(db, specs);
  std::string md = slurp(write_report(db, (dir / "out").string(), report_catalog()));
  size_t lm = md.find("## Language modelling");
  REQUIRE(lm != std::string::npos);
  std::string text = md.substr(lm, md.find("\n## ", lm + 1) - lm);

  // The run without summaries: final ppl from its last val ppl (35.88), best = min of the curve.
  CHECK(text.find("| " + std::to_string(ids[9]) + " | atlas | tiny | 1.00M | 2×128 | 256 | 1.64M | byte | "
                  "corpus/gutenberg | 200 | 35.88 | 5.165 | 35.88 | n/a | completed |") != std::string::npos);
  CHECK(text.find("Other (corpus, tokenizer, context) groups, not drawn above: corpus/gutenberg, sp-bpe:4096, "
                  "context 256 (1 runs: #" + std::to_string(ids[11]) + ");") != std::string::npos);
  CHECK(text.find("More than 8 runs: one panel per size") != std::string::npos);
  CHECK(non_empty_file(dir / "out" / "figures" / "lm_val_ppl_vs_tokens.png"));
  // 11 families in the main group: the scaling figure splits them into one panel per model group.
  std::string script = slurp(dir / "out" / "figures" / "data" / "lm_ppl_vs_params.gp");
  CHECK(script.find("set title 'attention'") != std::string::npos);
  CHECK(script.find("set title 'linear recurrent'") != std::string::npos);
  CHECK(script.find("set title 'deep test-time memory'") != std::string::npos);
  CHECK(script.find("set title 'Atlas family'") != std::string::npos);
  CHECK(text.find("Kendall τ-b between the paper's ranking and ours (340M/15B): **0.956** (n = 10 families, size "
                  "tiny") != std::string::npos);
  CHECK(text.find("| swa |") != std::string::npos);  // in the runs table, in no paper table
  CHECK(text.find("| swa | ") == text.rfind("| swa | "));
}

TEST_CASE("report: no language-modelling section without LM runs", "[report]") {
  fs::path dir = test::temp_dir("report_lm_empty");
  ResultsDB db((dir / "r.sqlite").string());
  std::string md = slurp(write_report(db, (dir / "out").string(), report_catalog()));
  CHECK(md.find("## Language modelling") == std::string::npos);

  RunInfo r;
  r.model = "transformer";
  r.task = "mqar";
  r.config_json = R"({"model":"transformer","d_model":32,"seq_len":64,"num_kv_pairs":4})";
  r.config_hash = "x";
  db.create_run(r);
  md = slurp(write_report(db, (dir / "out").string(), report_catalog()));
  CHECK(md.find("## Language modelling") == std::string::npos);
  CHECK_FALSE(fs::exists(dir / "out" / "figures" / "lm_ppl_vs_params.png"));
}
