// report.html in a real browser: headless Chromium loads a small report and a script appended
// to a copy of the page lists the images that did not load (naturalWidth 0) or are shown wider than drawn
// (naturalWidth < clientWidth: blurry upscaling). Chromium comes from scripts/setup; without it this test
// fails and says so.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "engine/report_catalog.h"
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
  var out = document.createElement('pre');
  out.id = 'mnemo-check';
  out.textContent = 'MNEMO_CHECK images=' + imgs.length + ' toc=' + document.querySelectorAll('nav.toc a').length +
      ' missing=[' + missing.join('; ') + '] upscaled=[' + upscaled.join('; ') + '] END';
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
  test::fill_mqar_families(db, {"transformer", "swa", "gated_deltanet", "mamba2", "gla", "deltanet", "retnet",
                                "titans_lmm", "atlas", "samba"});
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
      dom, m, std::regex("MNEMO_CHECK images=([0-9]+) toc=([0-9]+) missing=\\[([^\\]]*)\\] upscaled=\\[([^\\]]*)\\] END"));
  INFO("page: " << check.string() << "\nDOM tail: " << dom.substr(dom.size() > 2000 ? dom.size() - 2000 : 0));
  REQUIRE(found);  // the page loaded and its scripts ran
  CHECK(std::stoi(m[1].str()) >= 3);  // MQAR lines + ranking, curves, benchmarks ...
  CHECK(std::stoi(m[2].str()) >= 3);  // contents links
  CHECK(m[3].str() == "");            // every image present
  CHECK(m[4].str() == "");            // none shown wider than drawn
}
