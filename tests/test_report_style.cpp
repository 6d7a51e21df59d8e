// One colour and marker per model family across the report's figures, at most 8 lines a
// panel, legends in their own margin, ranking bars with the chance level, and report.html as a page.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "engine/tools/report_catalog.h"
#include "reports/family_style.h"
#include "reports/mqar_cells.h"
#include "reports/small_multiples.h"
#include "runtime/registry.h"
#include "reports/report.h"
#include "report_fixtures.h"
#include "file_util.h"
#include "test_util.h"

using namespace mnemo;
using mnemo::test::slurp;
namespace fs = std::filesystem;

namespace {

// The `lc rgb '#xxxxxx' pt N` style a gnuplot script gives the first series or key entry titled/commented
// `label` (plot_lines writes each series' data block as "# label" and its key entry as "title 'label'").
std::string key_style(const std::string& script, const std::string& label) {
  std::regex re("keyentry with \\w+ lw 2 (lc rgb '#[0-9a-f]{6}' pt [0-9]+) dt [0-9]+ ps 1 title '" + label + "'");
  std::smatch m;
  return std::regex_search(script, m, re) ? m[1].str() : "";
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("report style: every registered family has a style, distinct colours within each group", "[report]") {
  // Every registered family (`mnemo models`), with the styles their registrations declare (the report's catalog).
  set_family_styles(report_catalog()["families"]);
  const std::vector<std::string> registered = Registry::instance().model_names();
  std::map<std::string, std::set<std::string>> colours_of_group;
  std::map<std::string, size_t> members;
  for (const std::string& f : registered) {
    FamilyStyle s = family_style(f);
    INFO(f);
    CHECK(s.known);
    CHECK(s.group != "other");
    CHECK(std::regex_match(s.colour, std::regex("#[0-9a-f]{6}")));
    colours_of_group[s.group].insert(s.colour);
    ++members[s.group];
  }
  for (const auto& [group, colours] : colours_of_group) {
    INFO(group);
    CHECK(colours.size() == members[group]);  // no two families of a group share a colour
  }
  for (const std::string& f : registered)  // the attention baseline's black is its own in every figure
    if (f != "transformer") CHECK(family_style(f).colour != family_style("transformer").colour);
  CHECK(family_style("gated_deltanet").group == "linear recurrent");
  CHECK(family_style("titans_mal").group == "hybrids");
  CHECK(family_style("dot").group == "Atlas family");
  CHECK(family_style("lattice_dot").group == "MoM / Lattice");
  CHECK(known_families().size() == registered.size());
  // One marker per group.
  CHECK(family_style("transformer").point_type == family_style("swa").point_type);
  CHECK(family_style("transformer").point_type != family_style("gla").point_type);
  CHECK(style_palette().size() >= 11);

  // An unknown name (a plugin): a deterministic fallback from the palette, never a throw.
  FamilyStyle a = family_style("my_plugin_mixer"), b = family_style("my_plugin_mixer");
  CHECK_FALSE(a.known);
  CHECK(a.group == "other");
  CHECK(a.colour == b.colour);
  CHECK(a.point_type == b.point_type);
  CHECK(std::find(style_palette().begin(), style_palette().end(), a.colour) != style_palette().end());
  CHECK_NOTHROW(family_style(""));
}

TEST_CASE("report style: small multiples split by group with at most 8 lines", "[report]") {
  set_family_styles(report_catalog()["families"]);
  std::vector<Series> series;
  for (const std::string& f : known_families()) series.push_back({f, {1, 2}, {0.5, 0.6}, f});
  series.push_back({"plugin", {1, 2}, {0.5, 0.6}, "my_plugin"});
  series.push_back({"no family", {1, 2}, {0.5, 0.6}});
  auto groups = split_by_family_group(series, 8);
  size_t total = 0;
  for (const auto& g : groups) {
    CHECK(g.series.size() <= 8);
    total += g.series.size();
    for (const Series& s : g.series)
      if (!s.family.empty()) CHECK(g.group.rfind(family_style(s.family).group, 0) == 0);
  }
  CHECK(total == series.size());
  CHECK(groups.front().group == "attention");
  CHECK(groups[1].group == "linear recurrent (1/2)");  // 9 families: 5 + 4
  CHECK(groups[1].series.size() == 5);
  CHECK(groups[3].group == "deep test-time memory (1/2)");  // 11 families: 6 + 5
  CHECK(groups[3].series.size() == 6);
  CHECK(groups.back().group.empty());

  LinePlot plot;
  plot.panels = {{"L = 64", series}, {"L = 128", std::vector<Series>(series.begin(), series.begin() + 3)}};
  CHECK(split_panels_by_group(plot));
  CHECK(plot.columns == 2);
  CHECK(plot.keep_empty_panels);
  for (const Panel& p : plot.panels) CHECK(p.series.size() <= 8);
  CHECK(plot.panels[0].title == "L = 64 · attention");
  CHECK(plot.panels[1].title == "L = 128 · attention");
  LinePlot small;
  small.panels = {{"p", std::vector<Series>(series.begin(), series.begin() + 8)}};
  CHECK_FALSE(split_panels_by_group(small));
}

TEST_CASE("report style: a family keeps its colour across figures, legends sit outside the panels", "[report]") {
  fs::path dir = test::temp_dir("report_style");
  ResultsDB db((dir / "r.sqlite").string());
  const std::vector<std::string> families = {"transformer", "swa",      "gated_deltanet", "mamba2",   "gla",
                                             "deltanet",    "retnet",   "titans_lmm",     "ttt_linear", "atlas",
                                             "mom",         "samba"};
  test::fill_mqar_families(db, families);
  std::string out = (dir / "report").string();
  std::string md = slurp(write_report(db, out, report_catalog()));
  fs::path data = fs::path(out) / "figures" / "data";
  std::string mqar = slurp(data / "mqar_accuracy_vs_dmodel.gp"), curves = slurp(data / "curves_mqar.gp");
  REQUIRE_FALSE(mqar.empty());
  REQUIRE_FALSE(curves.empty());
  for (const std::string& f : families) {
    INFO(f);
    const std::string in_mqar = key_style(mqar, f);
    CHECK_FALSE(in_mqar.empty());
    CHECK(in_mqar.find(family_style(f).colour) != std::string::npos);
    // curves label runs "model d=.. lr=.. (#id)": the same family, the same colour and marker.
    std::smatch m;
    REQUIRE(std::regex_search(curves, m, std::regex("(lc rgb '#[0-9a-f]{6}' pt [0-9]+) dt [0-9]+ ps 1 title '" +
                                                    f + " d=")));
    CHECK(m[1].str() == in_mqar);
  }
  // 12 families > 8 lines: one row of panels per group, no panel with more than 8 series; legends are key
  // entries of their own plots placed in a margin (never `set key` inside a data panel).
  CHECK(mqar.find("· linear recurrent") != std::string::npos);
  CHECK(mqar.find("set key inside") == std::string::npos);
  for (const std::string& script : {mqar, curves}) {
    std::istringstream in(script);
    std::string line;
    size_t lines_in_panel = 0, worst = 0;
    while (std::getline(in, line)) {
      if (line.rfind("plot ", 0) == 0) lines_in_panel = 0;
      if (line.find(" index ") != std::string::npos) worst = std::max(worst, ++lines_in_panel);
    }
    CHECK(worst <= 8);
    CHECK(script.find("set rmargin at screen") != std::string::npos);
  }
  // Curves: each model's best run (24 runs > 8), the loss panels on a log axis (losses span > a decade).
  CHECK(md.find("each model's best run") != std::string::npos);
  CHECK(curves.find("set logscale y 10") != std::string::npos);
}

TEST_CASE("report style: a family's variant is a model of its own, drawn in its family's colour", "[report]") {
  set_family_styles(report_catalog()["families"]);
  // The registrations name the variants (mamba3's MIMO rank, Gated DeltaProduct's n_h); a run at the family's
  // default, or one that leaves the argument unset, is the plain model.
  CHECK(run_label({{"model", "mamba3"}, {"mamba_mimo_rank", 4}, {"chunk_size", 32}}, "mamba3") ==
        "mamba3 (MIMO rank 4)");
  CHECK(run_label({{"mamba_mimo_rank", 0}}, "mamba3") == "mamba3");
  CHECK(run_label({{"d_model", 64}}, "mamba3") == "mamba3");
  CHECK(run_label({{"num_householder", 3}}, "gated_deltaproduct") == "gated_deltaproduct (n_h 3)");
  CHECK(run_label({{"num_householder", 2}}, "gated_deltaproduct") == "gated_deltaproduct");
  CHECK(run_label({{"mamba_mimo_rank", 2}}, "mamba3", {"d=32, 1 layers"}) == "mamba3 (MIMO rank 2, d=32, 1 layers)");
  CHECK(run_label({{"mamba_mimo_rank", 2}}, "gla") == "gla");  // not gla's variant
  // Whole numbers read without a decimal point; FoX's initial decay times are variants too.
  CHECK(run_label({{"fgate_decay_time_min", 32.0}, {"fgate_decay_time_max", 512.5}}, "fox") ==
        "fox (gate T_min 32, gate T_max 512.5)");
  CHECK(run_label({{"fgate_decay_time_min", 0.0}, {"fgate_decay_time_max", 0}}, "fox") == "fox");
  // The Pro block's parts on fox, and taken off fox_pro, are models of their own too.
  CHECK(run_label({{"use_k_shift", true}, {"use_v_shift", true}, {"q_block", 64}}, "fox") == "fox (k shift, v shift)");
  CHECK(run_label({{"use_k_shift", true}, {"use_v_shift", true}}, "fox_pro") == "fox_pro");
  CHECK(run_label({{"use_forget_gate", false}}, "fox_pro") == "fox_pro (forget gate false)");
  // The eigenvalue range of the delta-rule transitions, against each family's own default.
  CHECK(run_label({{"allow_neg_eigval", false}}, "gated_deltaproduct") ==
        "gated_deltaproduct (allow_neg_eigval false)");
  CHECK(run_label({{"allow_neg_eigval", true}}, "gated_deltaproduct") == "gated_deltaproduct");
  CHECK(run_label({{"allow_neg_eigval", true}}, "gated_deltanet") == "gated_deltanet (allow_neg_eigval)");
  // A switch set on reads as its label: PaTH with FoX's forget gate is the PaTH paper's PaTH-FoX.
  CHECK(run_label({{"use_forget_gate", true}}, "path_attn") == "path_attn (forget gate)");
  CHECK(run_label({{"use_forget_gate", false}}, "path_attn") == "path_attn");
  // Lattice's chunk changes its function (approximation (17)): C 1 is the exact recurrence, the paper's C = 1 row.
  CHECK(run_label({{"chunk_size", 1}}, "lattice_dec") == "lattice_dec (C 1)");
  CHECK(run_label({{"chunk_size", 4}}, "lattice_dot") == "lattice_dot");
  CHECK(run_label({{"chunk_size", 16}}, "gated_deltanet") == "gated_deltanet");  // a speed knob elsewhere
  CHECK(run_label({{"allow_neg_eigval", true}, {"num_householder", 3}}, "gated_deltaproduct") ==
        "gated_deltaproduct (n_h 3)");
  CHECK(family_of_label("mamba3 (MIMO rank 4)") == "mamba3");
  CHECK(family_of_label("gla @ step_100.pt") == "gla");
  CHECK(family_of_label("gla") == "gla");
  const FamilyStyle mimo = family_style("mamba3 (MIMO rank 4)");
  CHECK(mimo.known);
  CHECK(mimo.colour == family_style("mamba3").colour);

  // In a report: SISO and MIMO runs at one (L, N_KV, d_model) are two MQAR rows (not one cell taking the better
  // as if they were learning rates), two lines of one colour told apart by their dash pattern, and two runs.
  fs::path dir = test::temp_dir("report_variants");
  ResultsDB db((dir / "r.sqlite").string());
  for (int rank : {0, 4})
    for (int d : {32, 64}) {
      RunInfo r;
      r.model = "mamba3";
      r.task = "mqar";
      r.config_json = json{{"model", "mamba3"}, {"task", "mqar"},      {"d_model", d},       {"n_layers", 2},
                           {"seq_len", 32},     {"num_kv_pairs", 4}, {"vocab_size", 256}, {"lr", 3e-3},
                           {"mamba_mimo_rank", rank}}
                          .dump();
      r.config_hash = "mamba3_rank" + std::to_string(rank) + "_d" + std::to_string(d);
      const int64_t id = db.create_run(r);
      db.add_metrics({{id, 10, "test", "accuracy", (rank == 0 ? 0.2 : 0.7) * d / 64, 1.0},
                      {id, 10, "train", "loss", 3.0, 1.0},
                      {id, 10, "test", "loss", 3.0, 1.0}});
      db.set_run_last_step(id, 10);
      db.set_run_status(id, "completed");
    }
  const MqarCells cells = mqar_cells(db);
  REQUIRE(cells.cells.size() == 4);
  CHECK(cells.cells.at({32, 4, "mamba3", 64}).accuracy == Approx(0.2));
  CHECK(cells.cells.at({32, 4, "mamba3 (MIMO rank 4)", 64}).accuracy == Approx(0.7));
  const std::string out = (dir / "report").string();
  const std::string md = slurp(write_report(db, out, report_catalog()));
  CHECK(md.find("| mamba3 (MIMO rank 4) |") != std::string::npos);
  const std::string script = slurp(fs::path(out) / "figures" / "data" / "mqar_accuracy_vs_dmodel.gp");
  std::smatch siso, multi;
  REQUIRE(std::regex_search(script, siso, std::regex("lc rgb '(#[0-9a-f]{6})' pt ([0-9]+) dt ([0-9]+) ps 1 title "
                                                     "'mamba3'")));
  REQUIRE(std::regex_search(script, multi, std::regex("lc rgb '(#[0-9a-f]{6})' pt ([0-9]+) dt ([0-9]+) ps 1 title "
                                                      "'mamba3 \\(MIMO rank 4\\)'")));
  CHECK(siso[1].str() == family_style("mamba3").colour);
  CHECK(multi[1].str() == siso[1].str());
  CHECK(multi[2].str() == siso[2].str());
  CHECK(multi[3].str() != siso[3].str());
}

TEST_CASE("report style: plot_bars sorts best first and draws the chance line", "[report]") {
  set_family_styles(report_catalog()["families"]);  // the registrations' colours (a report installs them itself)
  fs::path dir = test::temp_dir("report_bars");
  BarPlot plot;
  plot.name = "rank";
  plot.title = "ranking";
  plot.xlabel = "accuracy";
  BarPanel p;
  p.title = "L = 64";
  p.bars = {{"swa", "swa", 0.4, ""}, {"transformer", "transformer", 0.9, ""}, {"gla", "gla", 0.6, ""},
            {"broken", "gla", NAN, ""}};
  p.chance = 1.0 / 128;
  p.chance_label = "chance 1/128";
  plot.panels = {p};
  Figure fig = plot_bars(plot, dir.string());
  CHECK(fs::file_size(fig.png) > 0);
  CHECK(fs::file_size(fig.svg) > 0);
  std::string script = slurp(dir / "data" / "rank.gp"), dat = slurp(dir / "data" / "rank_p0.dat");
  // Best first = top: transformer at y 2, gla 1, swa 0; the NaN bar is left out.
  CHECK(script.find("set ytics ('transformer' 2, 'gla' 1, 'swa' 0)") != std::string::npos);
  CHECK(dat.find("broken") == std::string::npos);
  CHECK(dat.find("2 0.90000000000000002 0 \"0.900\"") != std::string::npos);  // transformer is black
  CHECK(script.find("set arrow from first 0.0078125, graph 0 to first 0.0078125, graph 1 nohead dt (6,4)") !=
        std::string::npos);
  CHECK(script.find("set label 'chance 1/128'") != std::string::npos);
  CHECK(script.find("using ($2 > 0.0078125 ? $2 : 0.0078125):1:4 with labels left") != std::string::npos);
  CHECK(count(script, "boxxyerror") == 2);                       // PNG + SVG

  plot.higher_is_better = false;  // e.g. perplexity: lowest first
  plot_bars(plot, dir.string());
  CHECK(slurp(dir / "data" / "rank.gp").find("set ytics ('swa' 2, 'gla' 1, 'transformer' 0)") != std::string::npos);
  plot.panels[0].bars = {{"x", "", NAN, ""}};
  CHECK_THROWS_WITH(plot_bars(plot, dir.string()), Catch::Contains("no finite value"));
}

TEST_CASE("report style: MQAR ranking figure and report.html with CSS, contents and sortable tables", "[report]") {
  fs::path dir = test::temp_dir("report_html");
  ResultsDB db((dir / "r.sqlite").string());
  test::fill_mqar_families(db, {"transformer", "gated_deltanet", "atlas"});
  std::string out = (dir / "report").string();
  std::string md = slurp(write_report(db, out, report_catalog()));
  CHECK(md.find("figures/mqar_ranking.png") != std::string::npos);
  CHECK(md.find("chance 1/128") != std::string::npos);
  std::string bars = slurp(fs::path(out) / "figures" / "data" / "mqar_ranking.gp");
  CHECK(bars.find("set label 'chance 1/128'") != std::string::npos);
  CHECK(bars.find("d_model = 64") != std::string::npos);  // the largest d_model

  std::string html = slurp(fs::path(out) / "report.html");
  CHECK(html.find("<style>") != std::string::npos);
  CHECK(html.find("max-width:1100px") != std::string::npos);
  CHECK(html.find("figure img{max-width:100%;height:auto") != std::string::npos);
  CHECK(html.find("tbody tr:nth-child(even)") != std::string::npos);
  // Contents: a link per h2/h3 to the heading's id.
  CHECK(html.find("<nav class=\"toc\">") != std::string::npos);
  CHECK(html.find("<h2 id=\"mqar-accuracy-vs-model-dimension\">") != std::string::npos);
  CHECK(html.find("<a href=\"#mqar-accuracy-vs-model-dimension\">") != std::string::npos);
  CHECK(html.find("<h2 id=\"training-curves\">") != std::string::npos);
  CHECK(html.find("<a href=\"#training-curves\">") != std::string::npos);
  CHECK(html.find("<nav class=\"toc\">") > html.find("<h1"));
  // Tables: header row in <thead>, sortable by a small inline script.
  CHECK(html.find("<table class=\"sortable\">\n<thead><tr><th>model</th>") != std::string::npos);
  CHECK(html.find("<tbody>") != std::string::npos);
  CHECK(html.find("querySelectorAll('table.sortable')") != std::string::npos);
  // Unique ids even for repeated headings.
  std::string twice = markdown_to_html("# T\n\n## A\n\n### x\n\n## A\n", "t", dir.string());
  CHECK(twice.find("<h2 id=\"a\">") != std::string::npos);
  CHECK(twice.find("<h2 id=\"a-2\">") != std::string::npos);
  CHECK(twice.find("<a href=\"#x\">x</a>") != std::string::npos);
}

TEST_CASE("report style: a panel title wider than its panel is broken onto two lines", "[report]") {
  fs::path dir = test::temp_dir("report_title");
  LinePlot plot;
  plot.name = "wrap";
  plot.title = "figure";
  const std::string long_title = "mixer_fwdbwd: first-layer mixer alone, forward + backward · deep test-time memory (1/2)";
  plot.panels = {{long_title, {{"a", {1, 2}, {1, 2}, "gla"}}}, {"short", {{"a", {1, 2}, {2, 3}, "gla"}}}};
  plot_lines(plot, dir.string());
  std::string script = slurp(dir / "data" / "wrap.gp");
  CHECK(script.find("set title \"mixer_fwdbwd: first-layer mixer alone, forward + backward ·\\ndeep test-time memory "
                    "(1/2)\"") != std::string::npos);
  CHECK(script.find("set title 'short'") != std::string::npos);
}
