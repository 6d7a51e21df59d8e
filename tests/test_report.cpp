// `mnemo report`: sections over a hand-built results database, gnuplot figures, HTML.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/wait.h>

#include "engine/tools/report_catalog.h"
#include "reports/report.h"
#include "report_fixtures.h"
#include "file_util.h"
#include "test_util.h"

using namespace mnemo;
using mnemo::test::slurp;
namespace fs = std::filesystem;

namespace {

bool non_empty_file(const fs::path& p) { return fs::exists(p) && fs::file_size(p) > 0; }

}  // namespace

TEST_CASE("report: MQAR figure and tables from a hand-built database", "[report]") {
  fs::path dir = test::temp_dir("report_mqar");
  ResultsDB db((dir / "r.sqlite").string());
  test::fill_mqar_runs(db);
  test::fill_benches(db);
  std::string out = (dir / "report").string();
  std::string md_path = write_report(db, out, report_catalog());
  CHECK(md_path == (fs::path(out) / "report.md").string());
  std::string md = slurp(md_path);

  // Header, MQAR, curves, runs table and benchmarks are all present, in that order.
  size_t header = md.find("# mnemo report"), mqar = md.find("## MQAR"), curves = md.find("## Training curves"),
         runs = md.find("## All runs"), bench = md.find("## Benchmarks");
  REQUIRE(header != std::string::npos);
  REQUIRE(mqar != std::string::npos);
  REQUIRE(curves != std::string::npos);
  REQUIRE(runs != std::string::npos);
  REQUIRE(bench != std::string::npos);
  CHECK(header < mqar);
  CHECK(mqar < curves);
  CHECK(curves < runs);
  CHECK(runs < bench);
  CHECK(md.find(db.path()) != std::string::npos);

  // Both models, and the max over learning rates (0.950 for transformer d=128 at lr 1e-3), not
  // the worse lr's 0.25.
  std::string mqar_text = md.substr(mqar, curves - mqar);
  CHECK(mqar_text.find("| transformer |") != std::string::npos);
  CHECK(mqar_text.find("| swa |") != std::string::npos);
  CHECK(mqar_text.find("0.950 (lr 0.001, 2 lr") != std::string::npos);
  CHECK(mqar_text.find("0.600 (lr 0.001, 2 lr") != std::string::npos);
  CHECK(mqar_text.find("d=64") != std::string::npos);
  CHECK(mqar_text.find("d=128") != std::string::npos);
  CHECK(mqar_text.find("0.250") == std::string::npos);

  fs::path figures = fs::path(out) / "figures";
  CHECK(non_empty_file(figures / "mqar_accuracy_vs_dmodel.png"));
  CHECK(non_empty_file(figures / "mqar_accuracy_vs_dmodel.svg"));
  CHECK(md.find("figures/mqar_accuracy_vs_dmodel.png") != std::string::npos);
  // Legends carry model names: the gnuplot script titles its series by model.
  std::string script = slurp(figures / "data" / "mqar_accuracy_vs_dmodel.gp");
  CHECK(script.find("title 'transformer'") != std::string::npos);
  CHECK(script.find("title 'swa'") != std::string::npos);
  CHECK(script.find("set logscale x 2") != std::string::npos);
  CHECK(non_empty_file(figures / "curves_mqar.png"));
  CHECK(non_empty_file(figures / "bench_throughput.svg"));
  CHECK(non_empty_file(figures / "bench_peak_memory.png"));

  // Runs table: 8 runs, completed, with the best accuracy of each.
  std::string runs_text = md.substr(runs, bench - runs);
  CHECK(runs_text.find("| 8 | completed | swa | mqar | 128 | 2 | 0.01 | 30 | 0.250 | 0.100 | 5.0K |") !=
        std::string::npos);
  // Benchmarks: the decode state size (128 KiB = 0.125 MB) and the measuring machine.
  std::string bench_text = md.substr(bench);
  CHECK(bench_text.find("| 2.50 | 0.125 |") != std::string::npos);
  CHECK(bench_text.find("testhost") != std::string::npos);
  CHECK(bench_text.find("OpenBLAS") != std::string::npos);

  std::string html = slurp(fs::path(out) / "report.html");
  CHECK(html.find("<img src=\"figures/mqar_accuracy_vs_dmodel.svg\"") != std::string::npos);
  CHECK(html.find("<th>model</th>") != std::string::npos);
  CHECK(html.find("<h2 id=\"mqar-accuracy-vs-model-dimension\">MQAR: accuracy vs model dimension</h2>") != std::string::npos);
}

TEST_CASE("report: sections without data write nothing", "[report]") {
  fs::path dir = test::temp_dir("report_empty");
  ResultsDB db((dir / "empty.sqlite").string());
  std::string md = slurp(write_report(db, (dir / "out").string(), report_catalog()));
  CHECK(md.find("# mnemo report") != std::string::npos);
  CHECK(md.find("Training runs: 0") != std::string::npos);
  CHECK(md.find("## MQAR") == std::string::npos);
  CHECK(md.find("## Training curves") == std::string::npos);
  CHECK(md.find("## All runs") == std::string::npos);
  CHECK(md.find("## Benchmarks") == std::string::npos);
  CHECK(fs::exists(dir / "out" / "report.html"));

  // A run that is not MQAR appears in the runs table but not in the MQAR section.
  RunInfo r;
  r.model = "transformer";
  r.task = "mad_in_context_recall";
  r.config_json = R"({"model":"transformer","d_model":32})";
  r.config_hash = "x";
  db.create_run(r);
  md = slurp(write_report(db, (dir / "out").string(), report_catalog()));
  CHECK(md.find("## All runs") != std::string::npos);
  CHECK(md.find("## MQAR") == std::string::npos);
  CHECK(md.find("## Training curves") == std::string::npos);  // no metrics yet
}

TEST_CASE("report: section registry order and bad run configs", "[report]") {
  auto names = report_section_names();
  REQUIRE(names.size() >= 5);
  CHECK(names.front() == "header");
  auto pos = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  CHECK(pos("mqar") < pos("training_curves"));
  CHECK(pos("runs") < pos("benchmarks"));

  fs::path dir = test::temp_dir("report_bad");
  ResultsDB db((dir / "bad.sqlite").string());
  RunInfo r;
  r.model = "transformer";
  r.task = "mqar";
  r.config_json = "{not json";
  r.config_hash = "x";
  int64_t id = db.create_run(r);
  CHECK_THROWS_WITH(write_report(db, (dir / "out").string(), report_catalog()),
                    Catch::Contains("run " + std::to_string(id)) && Catch::Contains("config_json"));
}

TEST_CASE("report: gnuplot helpers validate input and draw heatmaps", "[report]") {
  fs::path dir = test::temp_dir("report_gnuplot");
  Heatmap map;
  map.name = "niah";
  map.title = "S-NIAH accuracy";
  map.xlabel = "context length";
  map.ylabel = "needle depth";
  map.col_labels = {"1K", "2K", "4K"};
  map.row_labels = {"0%", "50%", "100%"};
  map.panels = {{"transformer", {{100, 98, 90}, {100, 97, NAN}, {99, 95, 80}}},
                {"swa's model", {{100, 60, 10}, {100, 50, 5}, {100, 40, 0}}}};
  map.zmin = 0;
  map.zmax = 100;
  Figure fig = plot_heatmap(map, dir.string());
  CHECK(non_empty_file(fig.png));
  CHECK(non_empty_file(fig.svg));
  CHECK(slurp(fig.svg).find("swa's model") != std::string::npos);  // quotes survive

  map.panels[0].values.pop_back();
  CHECK_THROWS_WITH(plot_heatmap(map, dir.string()), Catch::Contains("has 2 rows, expected 3"));

  LinePlot empty;
  empty.name = "empty";
  empty.panels = {{"p", {{"only non-positive on a log axis", {0, -1}, {1, 2}}}}};
  empty.log_x = 10;
  CHECK_THROWS_WITH(plot_lines(empty, dir.string()), Catch::Contains("no finite data point"));
  LinePlot bad = empty;
  bad.name = "../escape";
  CHECK_THROWS_AS(plot_lines(bad, dir.string()), Error);
  CHECK(gnuplot_quote("it's") == "'it''s'");
  CHECK(markdown_table({"a", "b"}, {{"x|y", "1"}}) == "| a | b |\n| --- | ---: |\n| x\\|y | 1 |\n");
  CHECK(format_count(1234567) == "1.23M");
  CHECK(format_number(NAN) == "n/a");
}

TEST_CASE("report: the CLI refuses a missing database and reports a missing gnuplot", "[report]") {
  fs::path dir = test::temp_dir("report_cli");
  auto missing = test::run_mnemo("report --db " + (dir / "nope.sqlite").string() + " --out " +
                                 (dir / "out").string());
  CHECK(missing.exit_code != 0);
  CHECK(missing.output.find("nope.sqlite does not exist") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "nope.sqlite"));  // not created as a side effect

  {
    ResultsDB db((dir / "r.sqlite").string());
    test::fill_mqar_runs(db);
  }
  auto ok = test::run_mnemo("report --db " + (dir / "r.sqlite").string() + " --out " + (dir / "out").string());
  CHECK(ok.exit_code == 0);
  CHECK(fs::exists(dir / "out" / "report.md"));

  // Without gnuplot on PATH the report fails with a message saying so.
  std::string cmd = "PATH=/nonexistent " + std::string(MNEMO_BINARY) + " report --db " +
                    (dir / "r.sqlite").string() + " --out " + (dir / "out2").string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string output;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) output.append(buf, n);
  int status = pclose(p);
  CHECK(WEXITSTATUS(status) != 0);
  CHECK(output.find("gnuplot") != std::string::npos);
  CHECK(output.find("not found") != std::string::npos);
}
