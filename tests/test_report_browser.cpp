// report.html in a real browser: headless Chromium loads a small report at 1280 px and a script appended
// to a copy of the page lists the images that did not load (naturalWidth 0) or are shown wider than drawn
// (naturalWidth < clientWidth: blurry upscaling), the table cells whose text is clipped (scrollWidth >
// clientWidth) or lies outside its table's visible box (a table scrolls sideways when it is too wide), and the
// text cells not aligned left. Chromium comes from scripts/setup; without it this test fails and says so.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "engine/tools/report_catalog.h"
#include "reports/report.h"
#include "report_fixtures.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

namespace {

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    std::string cmd = std::string("command -v ") + name + " 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    char buf[512] = {0};
    std::string path = p && fgets(buf, sizeof buf, p) ? buf : "";
    if (p) pclose(p);
    while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
    if (!path.empty()) return path;
  }
  return "";
}

const char* const kCheckScript = R"(<script>
window.addEventListener('load', function () {
  var imgs = document.images, missing = [], upscaled = [];
  for (var i = 0; i < imgs.length; ++i) {
    var img = imgs[i], name = img.getAttribute('src');
    if (!img.complete || img.naturalWidth === 0) missing.push(name);
    else if (img.naturalWidth < img.clientWidth) upscaled.push(name + ' ' + img.naturalWidth + ' drawn, ' + img.clientWidth + ' shown');
  }
  var cells = document.querySelectorAll('td, th'), clipped = [], outside = [], text_right = [], numbers = 0;
  for (var c = 0; c < cells.length; ++c) {
    var cell = cells[c], text = cell.textContent.trim(), name = text.slice(0, 40).replace(/[\[\];]/g, ' ');
    if (text === '') continue;
    var box = cell.closest('table').getBoundingClientRect(), r = cell.getBoundingClientRect();
    if (cell.scrollWidth > cell.clientWidth + 1) clipped.push(name);
    if (r.right > box.right + 1 || r.left < box.left - 1) outside.push(name);
    if (cell.classList.contains('num')) ++numbers;
    else if (getComputedStyle(cell).textAlign === 'right') text_right.push(name);
  }
  var out = document.createElement('pre');
  out.id = 'mnemo-check';
  out.textContent = 'MNEMO_CHECK images=' + imgs.length + ' toc=' + document.querySelectorAll('nav.toc a').length +
      ' missing=[' + missing.join('; ') + '] upscaled=[' + upscaled.join('; ') + '] cells=' + cells.length +
      ' numbers=' + numbers + ' clipped=[' + clipped.join('; ') + '] outside=[' + outside.join('; ') +
      '] text_right=[' + text_right.join('; ') + '] END';
  document.body.appendChild(out);
});
</script>
)";

}  // namespace

TEST_CASE("report: report.html loads in headless Chromium with every figure at its natural size or smaller",
          "[report][browser]") {
  const std::string chromium = find_chromium();
  if (chromium.empty())
    FAIL("chromium is not installed: run scripts/setup (it installs Debian's chromium for this test)");

  fs::path dir = test::temp_dir("report_browser");
  ResultsDB db((dir / "r.sqlite").string());
  test::fill_mqar_runs(db);
  // Recorded as the quickstart's: the report then shows its protocol and the families it does not run.
  test::fill_mqar_families(db, {"transformer", "swa", "gated_deltanet", "mamba2", "gla", "deltanet", "retnet",
                                "titans_lmm", "atlas", "samba"}, {32, 64}, "quickstart-mqar");
  test::fill_benches(db);
  const fs::path out = dir / "report";
  write_report(db, out.string(), report_catalog());

  std::ifstream in(out / "report.html");
  std::stringstream page;
  page << in.rdbuf();
  std::string html = page.str();
  const size_t end = html.rfind("</body>");
  REQUIRE(end != std::string::npos);
  html.insert(end, kCheckScript);
  const fs::path check = out / "browser_check.html";
  std::ofstream(check) << html;

  const std::string cmd = "timeout 60 " + chromium +
                          " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run"
                          " --user-data-dir=" + (dir / "profile").string() +
                          " --window-size=1280,1024 --virtual-time-budget=5000 --dump-dom 'file://" +
                          fs::absolute(check).string() + "' 2>" + (dir / "chromium.log").string();
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string dom;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) dom.append(buf, n);
  const int status = pclose(p);
  INFO("chromium: " << cmd << "\nexit status " << status);
  std::smatch m;
  const bool found = std::regex_search(
      dom, m,
      std::regex("MNEMO_CHECK images=([0-9]+) toc=([0-9]+) missing=\\[([^\\]]*)\\] upscaled=\\[([^\\]]*)\\] "
                 "cells=([0-9]+) numbers=([0-9]+) clipped=\\[([^\\]]*)\\] outside=\\[([^\\]]*)\\] "
                 "text_right=\\[([^\\]]*)\\] END"));
  INFO("page: " << check.string() << "\nDOM tail: " << dom.substr(dom.size() > 2000 ? dom.size() - 2000 : 0));
  REQUIRE(found);  // the page loaded and its scripts ran
  CHECK(std::stoi(m[1].str()) >= 3);  // MQAR lines + ranking, curves, benchmarks ...
  CHECK(std::stoi(m[2].str()) >= 3);  // contents links
  CHECK(m[3].str() == "");            // every image present
  CHECK(m[4].str() == "");            // none shown wider than drawn
  CHECK(std::stoi(m[5].str()) >= 100);  // table cells: the machine, MQAR, claims, left-out families, benchmarks ...
  CHECK(std::stoi(m[6].str()) >= 20);   // numeric cells among them, right-aligned
  CHECK(m[7].str() == "");              // no cell's text clipped
  CHECK(m[8].str() == "");              // every cell inside its table's visible box at 1280 px
  CHECK(m[9].str() == "");              // text aligned left
}
