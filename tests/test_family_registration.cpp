// A family is its folder plus one registration: a mixer registered here, in the test, with its traits (FLOP
// formula, report style, quickstart learning rate) is listed by the registry, costed by the FLOP count, measured by
// bench and drawn by the report in its declared group and colour, with nothing else touched.
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>

#include "engine/tools/bench.h"
#include "engine/training/flops.h"
#include "engine/tools/quickstart.h"
#include "engine/tools/report_catalog.h"
#include "reports/family_style.h"
#include "reports/report.h"
#include "runtime/model.h"
#include "runtime/registry.h"
#include "file_util.h"
#include "report_fixtures.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

struct ProbeArgs {
  int64_t chunk_size = 16;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ProbeArgs, chunk_size)

// The smallest causal mixer: a per-token linear map (no state to carry).
class ProbeMixer : public Mixer {
 public:
  ProbeMixer(const MixerContext& ctx, const ProbeArgs&) {
    proj_ = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(ctx.d_model, ctx.d_model).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x, LayerState*) override { return proj_(x); }

 private:
  torch::nn::Linear proj_{nullptr};
};

const char* kProbe = "probe_family";

void register_probe_once() {
  if (Registry::instance().has_mixer(kProbe)) return;
  Registry::instance().add_mixer(make_mixer_family<ProbeArgs, ProbeMixer>(
      kProbe, "a test family registered by tests/test_family_registration.cpp",
      {chunked_recurrence_flops, {"probe group", "gold"}, 5e-3}));
}

ModelConfig probe_config(int64_t d, int64_t layers, int64_t heads) {
  ModelConfig c;
  c.model = kProbe;
  c.d_model = d;
  c.n_layers = layers;
  c.n_heads = heads;
  c.vocab_size = 64;
  return c;
}

}  // namespace

TEST_CASE("family registration: a family registered in one place is listed, costed, benchmarked and reported",
          "[registry][bench][report]") {
  register_probe_once();
  // Listed, with what its registration declares.
  const auto names = Registry::instance().model_names();
  REQUIRE(std::find(names.begin(), names.end(), kProbe) != names.end());
  const ModelFamily& model = Registry::instance().model(kProbe);
  CHECK(model.style.group == "probe group");
  CHECK(model.style.colour == "gold");
  CHECK(quickstart_mqar_lr(kProbe) == 5e-3);

  // The FLOP count: its registered formula, 2·C·d + 4·d·d_h per token and layer (C = its chunk_size default 16).
  const int64_t d = 32, L = 2, H = 4, T = 64, P = 10000;
  const ModelConfig mc = probe_config(d, L, H);
  const double mixing = 2.0 * 16 * d + 4.0 * d * (d / H);
  CHECK(mixer_flops_per_token(mc, 0, 0, T) == Approx(mixing));
  CHECK(training_flops(mc, P, 1000, T) == Approx(3.0 * 1000 * (2.0 * P + L * mixing)));
  CHECK(bench_flops(mc, P, "fwd", 2, T, 4) == Approx(2.0 * T * (2.0 * P + L * mixing)));
  CHECK(bench_flops(mc, P, "decode", 1, T, 4) == Approx(2.0 * P + L * 4.0 * d * (d / H)));  // no chunk in decode

  // Benchmarked: a row with a FLOP rate from the same formula.
  BenchOptions opt;
  opt.model = kProbe;
  opt.seq_lens = {32};
  opt.d_model = d;
  opt.n_layers = L;
  opt.n_heads = H;
  opt.vocab_size = 64;
  opt.warmup = 1;
  opt.repeats = 2;
  opt.device = "cpu";
  const std::vector<BenchRow> rows = run_benchmarks(opt);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].model == kProbe);
  CHECK(rows[0].gflops > 0);

  // Reported: in the catalog, then in the figures with its declared colour and a group (panel) of its own.
  const json catalog = report_catalog();
  bool in_catalog = false;
  for (const json& f : catalog["families"])
    if (f["name"] == kProbe) in_catalog = f["group"] == "probe group" && f["colour"] == "gold";
  CHECK(in_catalog);
  fs::path dir = test::temp_dir("family_registration");
  ResultsDB db((dir / "r.sqlite").string());
  std::vector<std::string> families = {kProbe, "transformer", "swa", "deltanet", "gated_deltanet", "gla", "retnet",
                                       "mamba2", "linear_attn"};
  test::fill_mqar_families(db, families);
  const std::string out = (dir / "report").string();
  write_report(db, out, catalog);
  const std::string mqar = test::slurp(fs::path(out) / "figures" / "data" / "mqar_accuracy_vs_dmodel.gp");
  REQUIRE_FALSE(mqar.empty());
  CHECK(std::regex_search(mqar, std::regex("lc rgb '#e6ab02' pt [0-9]+ dt [0-9]+ ps 1 title 'probe_family'")));
  CHECK(mqar.find("· probe group") != std::string::npos);  // 9 families > 8 lines: one panel row per group
  CHECK(family_style(kProbe).known);
  const auto groups = family_groups();
  CHECK(std::find(groups.begin(), groups.end(), "probe group") < std::find(groups.begin(), groups.end(), "other"));
}

TEST_CASE("family registration: a family without its FLOP formula or report style is refused by name", "[registry]") {
  MixerFamily no_flops = make_mixer_family<ProbeArgs, ProbeMixer>("probe_no_flops", "d", {{}, {"attention", "red"}});
  CHECK_THROWS_WITH(Registry::instance().add_mixer(no_flops),
                    Catch::Contains("probe_no_flops") && Catch::Contains("FLOP formula"));
  MixerFamily no_style = make_mixer_family<ProbeArgs, ProbeMixer>("probe_no_style", "d", {attention_flops, {}});
  CHECK_THROWS_WITH(Registry::instance().add_mixer(no_style),
                    Catch::Contains("probe_no_style") && Catch::Contains("report style"));
  // A report variant must name an argument of the family (ProbeArgs has chunk_size only).
  MixerFamily bad_variant = make_mixer_family<ProbeArgs, ProbeMixer>(
      "probe_bad_variant", "d", {attention_flops, {"attention", "red", {{"mimo_rank", "MIMO rank"}}}});
  CHECK_THROWS_WITH(Registry::instance().add_mixer(bad_variant),
                    Catch::Contains("probe_bad_variant") && Catch::Contains("'mimo_rank'") &&
                        Catch::Contains("not an argument"));
  CHECK_FALSE(Registry::instance().has_mixer("probe_bad_variant"));
  // A colour outside the palette: the report names the family and the palette.
  CHECK_THROWS_WITH(set_family_styles(json::array({{{"name", "probe_x"}, {"group", "attention"}, {"colour", "teal"}}})),
                    Catch::Contains("probe_x") && Catch::Contains("teal") && Catch::Contains("gold"));
}
