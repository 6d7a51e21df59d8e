// The report's "papers' MQAR claims" section: verdicts and Kendall's τ-b computed from the
// database, and the quickstart's protocol / left-out families from the catalog.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <sstream>

#include "engine/tools/quickstart.h"
#include "engine/tools/report_catalog.h"
#include "reports/claims.h"
#include "reports/mqar_cells.h"
#include "reports/report.h"
#include "runtime/registry.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

// One completed MQAR run whose test accuracy climbs to `best` (at d_model 64, L 64).
void add_mqar_run(ResultsDB& db, const std::string& model, int nkv, double lr, double best,
                  const std::string& sweep = "quickstart") {
  RunInfo r;
  r.model = model;
  r.task = "mqar";
  r.sweep = sweep;
  json cfg = {{"model", model}, {"task", "mqar"}, {"d_model", 64}, {"seq_len", 64}, {"num_kv_pairs", nkv}, {"lr", lr}};
  r.config_json = cfg.dump();
  r.config_hash = model + std::to_string(nkv) + std::to_string(lr);
  const int64_t id = db.create_run(r);
  db.add_metrics({{id, 100, "test", "accuracy", best / 2, 1.0}, {id, 200, "test", "accuracy", best, 2.0},
                  {id, 300, "test", "accuracy", best - 0.01, 3.0}});
  db.set_run_status(id, "completed");
}

std::string table_row(const std::string& md, const std::string& start) {
  const size_t at = md.find("| " + start);
  REQUIRE(at != std::string::npos);
  return md.substr(at, md.find('\n', at) - at);
}

}  // namespace

TEST_CASE("report claims: MQAR cells take the best evaluation, then the best learning rate", "[report]") {
  fs::path dir = test::temp_dir("claims_cells");
  ResultsDB db((dir / "r.sqlite").string());
  add_mqar_run(db, "transformer", 4, 1e-3, 0.5);
  add_mqar_run(db, "transformer", 4, 3e-3, 0.97);
  add_mqar_run(db, "linear_attn", 4, 1e-3, 0.4, "other");
  const MqarCells all = mqar_cells(db);
  REQUIRE(all.cells.size() == 2);
  const MqarCell& t = all.cells.at({64, 4, "transformer", 64});
  CHECK(t.accuracy == Approx(0.97));  // the best evaluation (step 200), not the last
  CHECK(t.best_lr == Approx(3e-3));
  CHECK(t.lrs.size() == 2);
  CHECK(t.runs == 2);
  CHECK(mqar_cells(db, "quickstart").cells.size() == 1);
}

TEST_CASE("report claims: a run trained on Zoology's mixture gives one MQAR cell per test slice", "[report]") {
  fs::path dir = test::temp_dir("claims_slices");
  ResultsDB db((dir / "r.sqlite").string());
  RunInfo r;
  r.model = "gated_deltanet";
  r.task = "mqar";
  r.sweep = "quickstart";
  r.config_json = json{{"model", "gated_deltanet"}, {"task", "mqar"},     {"d_model", 32},
                       {"seq_len", 64},            {"num_kv_pairs", 4}, {"vocab_size", 128},
                       {"lr", 2e-3},               {"test_num_kv_pairs", {4, 8, 16}}}
                      .dump();
  r.config_hash = "mix";
  const int64_t id = db.create_run(r);
  db.add_metrics({{id, 100, "test", "accuracy", 0.5, 1.0},       {id, 100, "test", "accuracy_nkv4", 0.9, 1.0},
                  {id, 100, "test", "accuracy_nkv8", 0.5, 1.0},  {id, 100, "test", "accuracy_nkv16", 0.1, 1.0},
                  {id, 200, "test", "accuracy_nkv4", 0.95, 2.0}, {id, 200, "test", "accuracy_nkv8", 0.4, 2.0}});
  db.set_run_status(id, "completed");
  const MqarCells got = mqar_cells(db);
  REQUIRE(got.cells.size() == 3);
  CHECK(got.cells.at({64, 4, "gated_deltanet", 32}).accuracy == Approx(0.95));  // best evaluation per slice
  CHECK(got.cells.at({64, 8, "gated_deltanet", 32}).accuracy == Approx(0.5));
  CHECK(got.cells.at({64, 16, "gated_deltanet", 32}).accuracy == Approx(0.1));
  CHECK(got.vocab_sizes.at({64, 16}) == std::set<int64_t>{128});
  CHECK(got.no_accuracy.empty());
}

TEST_CASE("report claims: verdicts and tau-b follow the numbers in the database", "[report]") {
  fs::path dir = test::temp_dir("claims_verdicts");
  ResultsDB db((dir / "r.sqlite").string());
  // The papers' pattern: attention solves both settings, the delta rule holds up, linear attention falls.
  add_mqar_run(db, "transformer", 4, 2e-3, 1.0);
  add_mqar_run(db, "transformer", 8, 2e-3, 0.99);
  add_mqar_run(db, "gated_deltanet", 4, 2e-3, 0.98);
  add_mqar_run(db, "gated_deltanet", 8, 2e-3, 0.8);
  add_mqar_run(db, "linear_attn", 4, 2e-3, 0.9);
  add_mqar_run(db, "linear_attn", 8, 2e-3, 0.3);
  // DeltaNet no better than linear attention at N_KV = 8: that claim must disagree.
  add_mqar_run(db, "deltanet", 8, 2e-3, 0.1);
  const std::string md = read_text_file(write_report(db, (dir / "out").string(), report_catalog()));

  CHECK(md.find("## The papers' MQAR claims") != std::string::npos);
  CHECK(table_row(md, "Softmax attention solves MQAR").find("| agrees |") != std::string::npos);
  const std::string gdn = table_row(md, "Gated DeltaNet recalls better");
  CHECK(gdn.find("N_KV=8 (L=64): gated_deltanet 0.800 vs linear_attn 0.300") != std::string::npos);
  CHECK(gdn.find("| agrees |") != std::string::npos);
  CHECK(table_row(md, "DeltaNet recalls better").find("| disagrees |") != std::string::npos);
  CHECK(table_row(md, "A deep test-time memory").find("not testable") != std::string::npos);
  CHECK(gdn.find("than linear attention (identity features, no normaliser)") != std::string::npos);
  CHECK(table_row(md, "Recall of linear attention (identity features").find("| agrees |") != std::string::npos);
  CHECK(md.find("than linear attention (Katharopoulos") == std::string::npos);  // it did not run
  CHECK(md.find("### d_model = 64: 4 of 5 testable claims agree") != std::string::npos);
  // tau-b at N_KV = 4 (transformer 1.0 > gdn 0.98 > linear_attn 0.9 against tiers 2 > 1 > 0) is 1.
  CHECK(table_row(md, "N_KV=4 (L=64) | 3 |").find("| 1.00 |") != std::string::npos);
  // At N_KV = 8 deltanet (tier 1) is last: 4 concordant, 1 discordant (linear_attn > deltanet), 1 tied tier
  // (gated_deltanet, deltanet) of 6 pairs -> (4-1)/sqrt(6*5) = 0.548.
  CHECK(table_row(md, "N_KV=8 (L=64) | 4 |").find("| 0.55 |") != std::string::npos);

  // One d_model only: no accuracy-vs-d_model figure of overlapping dots, the ranking figure instead.
  CHECK(md.find("Every MQAR run has d_model = 64") != std::string::npos);
  CHECK(md.find("figures/mqar_accuracy_vs_dmodel.png") == std::string::npos);
  CHECK(md.find("figures/mqar_ranking.png") != std::string::npos);

  // The quickstart's protocol and the families it leaves out come from the catalog.
  CHECK(md.find("**Quickstart protocol.**\n\n- Task: MQAR") != std::string::npos);
  CHECK(md.find("| atlas |") != std::string::npos);
  CHECK(md.find("| transformer | budget") == std::string::npos);
}

TEST_CASE("report claims: the linear-memory claims use Katharopoulos's linear attention where it ran", "[report]") {
  fs::path dir = test::temp_dir("claims_elu");
  ResultsDB db((dir / "r.sqlite").string());
  for (int nkv : {16, 64}) {
    add_mqar_run(db, "transformer", nkv, 2e-3, 1.0);
    add_mqar_run(db, "deltanet", nkv, 2e-3, nkv == 16 ? 0.97 : 0.6);
    add_mqar_run(db, "linear_attn_elu", nkv, 2e-3, nkv == 16 ? 0.3 : 0.1);
  }
  add_mqar_run(db, "linear_attn", 16, 2e-3, 0.95);
  add_mqar_run(db, "linear_attn", 64, 2e-3, 0.58);
  // N_KV 4: every model within the margin, so no rank correlation is claimed there.
  add_mqar_run(db, "transformer", 4, 2e-3, 0.99);
  add_mqar_run(db, "deltanet", 4, 2e-3, 1.0);
  add_mqar_run(db, "linear_attn_elu", 4, 2e-3, 0.97);
  const std::string md = read_text_file(write_report(db, (dir / "out").string(), report_catalog()));
  const std::string dn = table_row(md, "DeltaNet recalls better than linear attention (Katharopoulos");
  CHECK(dn.find("N_KV=64 (L=64): deltanet 0.600 vs linear_attn_elu 0.100") != std::string::npos);
  CHECK(dn.find("| agrees |") != std::string::npos);
  CHECK(md.find("than linear attention (identity") == std::string::npos);  // one form is judged
  CHECK(table_row(md, "Recall of linear attention (Katharopoulos").find("linear_attn_elu 0.970 -> 0.100") !=
        std::string::npos);
  CHECK(table_row(md, "A deep test-time memory (Titans LMM) recalls better than linear attention (Katharopoulos")
            .find("not testable") != std::string::npos);
  CHECK(md.find("Within its state's capacity") == std::string::npos);  // a sentence the report no longer writes
  CHECK(table_row(md, "N_KV=4 (L=64) | 3 |").find("| - (every model within 0.05) |") != std::string::npos);
  CHECK(table_row(md, "N_KV=64 (L=64) | 4 |").find("| - (every") == std::string::npos);
}

TEST_CASE("quickstart: its sweeps name real families and the catalog leaves out the rest", "[report]") {
  const json mqar = quickstart_mqar_sweep(quickstart_mqar_models());
  CHECK(mqar["base"]["test_num_kv_pairs"].size() == 3);
  CHECK(mqar["cases"].size() == quickstart_mqar_models().size());
  CHECK(mqar["cases"][0] == json({{"model", "mamba2"}, {"lr", 8e-3}}));  // the longest run first
  CHECK(mqar["cases"][1] == json({{"model", "linear_attn"}, {"lr", 2e-3}}));
  CHECK(mqar["cases"][2] == json({{"model", "linear_attn_elu"}, {"lr", 3.2e-2}}));  // both linear attentions
  CHECK(mqar["cases"][5] == json({{"model", "transformer"}, {"short_conv", true}, {"lr", 4e-3}}));
  CHECK(mqar["base"]["steps"] == 2400);
  CHECK(mqar["base"]["vocab_size"] == 512);
  CHECK(mqar["base"]["seq_len"] == 128);  // N_KV up to 32 = d_head (L >= 4 N_KV)
  CHECK(mqar["base"]["test_num_kv_pairs"] == json({8, 16, 32}));
  CHECK_FALSE(mqar["base"].contains("lr"));  // each case carries its own
  const json catalog = quickstart_catalog();
  for (const std::string& m : quickstart_mqar_models()) CHECK_FALSE(catalog["left_out"].contains(m));
  CHECK(catalog["left_out"]["titans_lmm"].get<std::string>().find("budget, measured") != std::string::npos);
  REQUIRE(catalog["protocol"].is_array());
  CHECK(catalog["protocol"][0].get<std::string>().find("MQAR") != std::string::npos);
  for (const auto& fact : catalog["protocol"]) {  // short facts, citing papers rather than project history
    CHECK(fact.get<std::string>().size() < 450);
    CHECK(fact.get<std::string>().find("session") == std::string::npos);
    CHECK(fact.get<std::string>().find("models.md") == std::string::npos);  // check-docs: allow (asserts absence)
  }
  CHECK(catalog["left_out"]["atlas"].get<std::string>().find("budget, measured") != std::string::npos);
  const json lm = quickstart_lm_sweep(quickstart_lm_models());
  CHECK(lm["base"]["task"] == "lm");
  CHECK(lm["cases"].size() == quickstart_lm_models().size());
  // ATLAS with its cost keys recorded in the case (and so in the run's config), the longest run first.
  CHECK(lm["cases"][0] == json({{"model", "atlas"}, {"atlas_readout", "chunk_start"}, {"ns_granularity", "chunk"},
                                {"chunk_size", 64}, {"atlas_recompute", false}}));
  CHECK(lm["cases"][1] == json({{"model", "transformer"}}));
}

TEST_CASE("report claims: the verdicts as the plain-text table the quickstart prints", "[report]") {
  fs::path dir = test::temp_dir("claims_text");
  ResultsDB db((dir / "r.sqlite").string());
  CHECK(claims_text_table(mqar_claim_verdicts(db)).empty());  // no MQAR runs: nothing to print
  for (int nkv : {4, 16}) {
    add_mqar_run(db, "transformer", nkv, 1e-3, 0.99);
    add_mqar_run(db, "deltanet", nkv, 1e-3, nkv == 4 ? 0.95 : 0.9);
    add_mqar_run(db, "linear_attn", nkv, 1e-3, nkv == 4 ? 0.8 : 0.3);
  }
  const auto verdicts = mqar_claim_verdicts(db);
  REQUIRE(verdicts.size() == 6);  // the six claims at d_model 64
  const std::string text = claims_text_table(verdicts, 100);
  INFO(text);
  CHECK_THAT(text, Catch::StartsWith("MQAR claims at d_model = 64: 3 of 3 testable claims agree\n"));
  CHECK_THAT(text, Catch::Contains("claim") && Catch::Contains("ours") && Catch::Contains("verdict"));
  // the "ours" cell wraps inside its column at this width
  CHECK_THAT(text, Catch::Contains("deltanet 0.900 vs") && Catch::Contains("linear_attn 0.300"));
  CHECK_THAT(text, Catch::Contains("not testable"));
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) CHECK(line.size() <= 100);
}

TEST_CASE("quickstart: each family left out of the MQAR stage has a reason about that family", "[report][quickstart]") {
  const json left_out = quickstart_catalog()["left_out"];
  auto& reg = Registry::instance();
  const auto mqar = quickstart_mqar_models();
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  for (const std::string& name : reg.model_names()) {
    if (std::find(mqar.begin(), mqar.end(), name) != mqar.end()) continue;
    INFO(name);
    REQUIRE(left_out.contains(name));
    const std::string reason = left_out[name].get<std::string>();
    CAPTURE(reason);
    CHECK_FALSE(reason.empty());
    const ModelFamily& family = reg.model(name);
    // A family that cannot run gives its registration's reason (an earlier shared text blamed ATLAS's cost for
    // mom_hybrid, which has no ATLAS layer); the measured reasons (titans_lmm, atlas) are about the family too.
    if (!family.cpu_quickstart && reason.find("budget, measured") == std::string::npos)
      CHECK(reason == family.quickstart_note);
    if (family.cpu_quickstart) CHECK_THAT(reason, Catch::Contains(name));
    // ATLAS is named only where a layer of the family is an ATLAS memory.
    const bool has_atlas = std::any_of(family.layer_pattern.begin(), family.layer_pattern.end(),
                                       [](const std::string& m) { return m.rfind("atlas", 0) == 0; });
    if (!has_atlas) CHECK(lower(reason).find("atlas") == std::string::npos);
  }
  CHECK_THAT(left_out["mom_hybrid"].get<std::string>(), Catch::Contains("MoM"));
}
