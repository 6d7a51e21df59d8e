// `mnemo data fetch recall` (engine/data_fetch, core/http) against a local HTTP server on 127.0.0.1 that serves
// fixture pages in the Hugging Face datasets-server /rows format; never the internet.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "core/signals.h"
#include "engine/io/data_fetch.h"
#include "file_util.h"
#include "http_test_server.h"
#include "test_util.h"

using namespace mnemo;
using mnemo::test::HttpReply;
using mnemo::test::HttpRequest;
using mnemo::test::HttpTestServer;
using mnemo::test::slurp;
namespace fs = std::filesystem;
using test::TempDir;

namespace {


// A build without libcurl (cmake -DMNEMO_CURL=OFF) has no HTTP client to test.
#define SKIP_WITHOUT_CURL()                                              \
  if (!http_available()) {                                               \
    WARN("skipped: this build has no libcurl (cmake -DMNEMO_CURL=OFF)"); \
    return;                                                              \
  }

// A proxy from the environment must not see the loopback requests.
void no_proxy_for_loopback() {
  ::setenv("no_proxy", "127.0.0.1,localhost", 1);
  ::setenv("NO_PROXY", "127.0.0.1,localhost", 1);
}

const char* kDataset = "test/recall-fixture";
constexpr int kRows = 250;

// Row i of the fixture split: keys deliberately not in alphabetical order (the file keeps the API's order), a
// non-ASCII character, a list.
nlohmann::ordered_json fixture_row(int i) {
  nlohmann::ordered_json row;
  row["text"] = "Document " + std::to_string(i) + ": caf\u00e9 \"quoted\"\nsecond line. Key:";
  row["key"] = "key";
  row["value"] = "value " + std::to_string(i);
  row["answers"] = {"a" + std::to_string(i), "b"};
  return row;
}

std::string expected_jsonl(int rows = kRows) {
  std::string s;
  for (int i = 0; i < rows; ++i) s += fixture_row(i).dump() + "\n";
  return s;
}

// One /rows page, as the datasets-server writes it.
std::string rows_page(int offset, int length, int total = kRows) {
  nlohmann::ordered_json page;
  page["features"] = nlohmann::ordered_json::array();
  int idx = 0;
  for (const char* name : {"text", "key", "value"})
    page["features"].push_back(
        {{"feature_idx", idx++}, {"name", name}, {"type", {{"dtype", "string"}, {"_type", "Value"}}}});
  page["rows"] = nlohmann::ordered_json::array();
  for (int i = offset; i < std::min(total, offset + length); ++i)
    page["rows"].push_back(
        {{"row_idx", i}, {"row", fixture_row(i)}, {"truncated_cells", nlohmann::ordered_json::array()}});
  page["num_rows_total"] = total;
  page["num_rows_per_page"] = 100;
  page["partial"] = false;
  return page.dump();
}

HttpReply error_reply(int status, const std::string& message) {
  return HttpReply{status, json{{"error", message}}.dump(), {}, -1};
}

// The fixture API: /rows for kDataset (config default, split validation); anything else 404 as the real one does.
HttpReply serve_rows(const HttpRequest& r) {
  auto param = [&](const std::string& k) { return r.params.count(k) ? r.params.at(k) : std::string(); };
  if (r.path != "/rows" || param("dataset") != kDataset || param("config") != "default" ||
      param("split") != "validation")
    return error_reply(404, "Not found.");
  const int offset = std::stoi(param("offset")), length = std::stoi(param("length"));
  if (length > 100) return error_reply(422, "Parameter 'length' must not be greater than 100");
  return HttpReply{200, rows_page(offset, length), {}, -1};
}

RecallSource fixture_source(const std::string& task = "fda") {
  return RecallSource{task, kDataset, "default", "validation"};
}

FetchOptions options_for(const HttpTestServer& server, const fs::path& dir, std::ostream* log = nullptr) {
  FetchOptions o;
  o.endpoint = server.url();
  o.out_dir = dir.string();
  o.page_size = 100;
  o.http.max_retries = 2;
  o.http.backoff_base_s = 0;  // no real waits in the tests
  o.http.backoff_max_s = 0;
  o.http.timeout_s = 20;
  o.log = log;
  return o;
}

std::vector<int> offsets_asked(const HttpTestServer& server) {
  std::vector<int> out;
  for (const HttpRequest& r : server.log())
    out.push_back(r.params.count("offset") ? std::stoi(r.params.at("offset")) : -1);
  return out;
}

int64_t lines_in(const fs::path& p) {
  const std::string s = slurp(p);
  return std::count(s.begin(), s.end(), '\n');
}

}  // namespace

TEST_CASE("data fetch: the recall sources are the Based suite's six, and an unknown task lists the known ones",
          "[data_fetch]") {
  REQUIRE(recall_sources().size() == 6);
  CHECK(recall_source("fda").dataset == "hazyresearch/based-fda");
  CHECK(recall_source("swde").dataset == "hazyresearch/based-swde-v2");
  CHECK(recall_source("squad_completion").dataset == "hazyresearch/based-squad");
  CHECK(recall_source("triviaqa").dataset == "hazyresearch/based_triviaqa");
  CHECK(recall_source("nq").dataset == "hazyresearch/based_nq_2048");
  CHECK(recall_source("drop").dataset == "hazyresearch/based_drop");
  for (const RecallSource& s : recall_sources()) {
    CHECK(s.config == "default");
    CHECK(s.split == "validation");
  }
  REQUIRE_THROWS_WITH(recall_source("squad"), Catch::Contains("unknown recall task 'squad'") &&
                                                  Catch::Contains("fda, swde, squad_completion, triviaqa, nq, drop"));
}

TEST_CASE("data fetch: a full fetch writes the rows in order, records the checksum, and a second run is up to date",
          "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  HttpTestServer server(serve_rows);
  TempDir dir("fetch_full");
  std::ostringstream log;
  FetchOptions o = options_for(server, dir.path, &log);

  const FetchResult r = fetch_recall_source(fixture_source(), o);
  CHECK(r.status == "fetched");
  CHECK(r.rows == kRows);
  CHECK(r.requests == 3);
  CHECK(offsets_asked(server) == std::vector<int>{0, 100, 200});
  CHECK(server.log()[2].params.at("length") == "50");  // the last page asks only for what is left
  CHECK(server.log()[0].params.at("dataset") == kDataset);
  const fs::path file = dir.path / "fda.jsonl";
  const std::string want = expected_jsonl();
  REQUIRE(slurp(file) == want);  // row order, key order and content as served
  CHECK_FALSE(fs::exists(dir.path / "fda.jsonl.part"));
  CHECK_FALSE(fs::exists(dir.path / "fda.jsonl.part.json"));
  CHECK(log.str().find("fda: 100/250 rows") != std::string::npos);
  CHECK(log.str().find("rows/s") != std::string::npos);

  const json sums = read_json_file((dir.path / "CHECKSUMS.json").string());
  REQUIRE(sums.contains("fda"));
  CHECK(sums["fda"]["sha256"] == sha256_hex(want));
  CHECK(r.sha256 == sha256_hex(want));
  CHECK(sums["fda"]["rows"] == kRows);
  CHECK(sums["fda"]["bytes"] == want.size());
  CHECK(sums["fda"]["dataset"] == kDataset);
  CHECK(sums["fda"]["config"] == "default");
  CHECK(sums["fda"]["split"] == "validation");
  CHECK(sums["fda"]["file"] == "fda.jsonl");
  CHECK(sums["fda"]["source"] == server.url() + "/rows?dataset=test/recall-fixture&config=default&split=validation");
  CHECK(sums["fda"]["fetched_at"].get<std::string>().size() == 20);

  // Again: nothing is requested.
  const FetchResult again = fetch_recall_source(fixture_source(), o);
  CHECK(again.status == "up to date");
  CHECK(again.requests == 0);
  CHECK(server.requests() == 3);

  // A changed file is not silently kept nor silently replaced; --force fetches it again.
  { std::ofstream(file, std::ios::app) << "{}\n"; }
  REQUIRE_THROWS_WITH(fetch_recall_source(fixture_source(), o), Catch::Contains(file.string()) &&
                                                                    Catch::Contains("differs from the one recorded") &&
                                                                    Catch::Contains("--force"));
  o.force = true;
  const FetchResult forced = fetch_recall_source(fixture_source(), o);
  CHECK(forced.status == "fetched");
  CHECK(server.requests() == 6);
  CHECK(slurp(file) == want);
}

TEST_CASE("data fetch: a file with no checksum record is not overwritten without --force", "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  HttpTestServer server(serve_rows);
  TempDir dir("fetch_norecord");
  { std::ofstream(dir.path / "fda.jsonl") << "{\"text\": \"mine\"}\n"; }
  REQUIRE_THROWS_WITH(fetch_recall_source(fixture_source(), options_for(server, dir.path)),
                      Catch::Contains("no record in") && Catch::Contains("--force"));
  CHECK(server.requests() == 0);
}

TEST_CASE("data fetch: a 500 or a 429 is retried", "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  int failures_left = 2;  // the handler runs on the server thread, one request at a time
  HttpTestServer server([&](const HttpRequest& r) {
    if (r.params.count("offset") && r.params.at("offset") == "100" && failures_left > 0) {
      --failures_left;
      if (failures_left == 1) return error_reply(500, "Unexpected error.");
      HttpReply busy = error_reply(429, "Too many requests");
      busy.headers.push_back("Retry-After: 0");
      return busy;
    }
    return serve_rows(r);
  });
  TempDir dir("fetch_retry");
  const FetchResult r = fetch_recall_source(fixture_source(), options_for(server, dir.path));
  CHECK(r.status == "fetched");
  CHECK(r.requests == 5);
  CHECK(offsets_asked(server) == std::vector<int>{0, 100, 100, 100, 200});
  CHECK(slurp(dir.path / "fda.jsonl") == expected_jsonl());
}

TEST_CASE("data fetch: a 404 or 403 ends in one error naming the URL and the status, without retries", "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  ::unsetenv("HF_TOKEN");
  int status = 404;
  HttpTestServer server([&](const HttpRequest& r) {
    return status == 404 ? error_reply(404, "The dataset does not exist on the Hub.")
                         : error_reply(403, "The dataset is gated.");
  });
  TempDir dir("fetch_404");
  const FetchOptions o = options_for(server, dir.path);
  const std::string url = server.url() + "/rows?dataset=test/recall-fixture&config=default&split=validation&offset=0";
  REQUIRE_THROWS_WITH(fetch_recall_source(fixture_source(), o),
                      Catch::Contains(url) && Catch::Contains("HTTP 404 (Not Found)") &&
                          Catch::Contains("The dataset does not exist on the Hub.") && Catch::Contains("--config"));
  CHECK(server.requests() == 1);
  status = 403;
  REQUIRE_THROWS_WITH(fetch_recall_source(fixture_source(), o),
                      Catch::Contains(url) && Catch::Contains("HTTP 403 (Forbidden)") && Catch::Contains("HF_TOKEN"));
  CHECK(server.requests() == 2);
  CHECK_FALSE(fs::exists(dir.path / "fda.jsonl"));
  CHECK_FALSE(fs::exists(dir.path / "fda.jsonl.part"));  // nothing fetched, nothing left behind
  CHECK_FALSE(fs::exists(dir.path / "CHECKSUMS.json"));
}

TEST_CASE("data fetch: a truncated body or invalid JSON is an error with no final file, and the .part resumes",
          "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  std::string broken = "truncated";  // what page offset=100 (truncated) or 200 (invalid) does; "" = serve it
  HttpTestServer server([&](const HttpRequest& r) {
    HttpReply reply = serve_rows(r);
    const std::string off = r.params.count("offset") ? r.params.at("offset") : "";
    if (broken == "truncated" && off == "100") reply.send_bytes = static_cast<long>(reply.body.size() / 2);
    if (broken == "invalid" && off == "200") reply.body = reply.body.substr(0, reply.body.size() / 2);
    return reply;
  });
  TempDir dir("fetch_truncated");
  const FetchOptions o = options_for(server, dir.path);
  const fs::path file = dir.path / "fda.jsonl", part = dir.path / "fda.jsonl.part";

  // Content-Length larger than what arrives: retried (a network hiccup), then an error naming the URL.
  REQUIRE_THROWS_WITH(fetch_recall_source(fixture_source(), o),
                      Catch::Contains("offset=100&length=100") && Catch::Contains("after 3 attempts") &&
                          Catch::Contains(part.string() + " keeps the 100 rows"));
  CHECK(server.requests() == 1 + 3);
  CHECK_FALSE(fs::exists(file));
  CHECK(lines_in(part) == 100);

  // The next run resumes at row 100; page 200 is now cut short with a valid Content-Length: not JSON.
  broken = "invalid";
  REQUIRE_THROWS_WITH(fetch_recall_source(fixture_source(), o), Catch::Contains("offset=200&length=50") &&
                                                                    Catch::Contains("not valid JSON") &&
                                                                    Catch::Contains("keeps the 200 rows"));
  CHECK(offsets_asked(server) == std::vector<int>{0, 100, 100, 100, 100, 200});
  CHECK_FALSE(fs::exists(file));
  CHECK(lines_in(part) == 200);

  // Served whole again: only the remaining page is fetched, and the file equals a one-go download.
  broken = "";
  const FetchResult r = fetch_recall_source(fixture_source(), o);
  CHECK(r.status == "fetched");
  CHECK(r.requests == 1);
  CHECK(slurp(file) == expected_jsonl());
  CHECK_FALSE(fs::exists(part));
}

TEST_CASE("data fetch: a stop request (SIGINT) keeps the .part, and the next run fetches only the remaining pages",
          "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  HttpTestServer server(serve_rows);
  TempDir dir("fetch_resume");
  std::ostringstream log;
  FetchOptions o = options_for(server, dir.path, &log);
  request_stop(SIGINT);  // before the first page: nothing fetched, nothing to resume from
  const FetchResult early = fetch_recall_source(fixture_source(), o);
  clear_stop_request();
  CHECK(early.status == "stopped");
  CHECK(early.rows == 0);
  CHECK(server.requests() == 0);
  o.on_page = [](int64_t rows, int64_t) {
    if (rows == 100) request_stop(SIGINT);  // as if Ctrl-C came while page 1 was being written
  };
  const FetchResult stopped = fetch_recall_source(fixture_source(), o);
  clear_stop_request();
  CHECK(stopped.status == "stopped");
  CHECK(stopped.rows == 100);
  CHECK(stopped.rows_total == kRows);
  CHECK(server.requests() == 1);
  const fs::path part = dir.path / "fda.jsonl.part";
  CHECK(lines_in(part) == 100);
  CHECK_FALSE(fs::exists(dir.path / "fda.jsonl"));
  const json state = read_json_file(part.string() + ".json");
  CHECK(state["rows"] == 100);
  CHECK(state["num_rows_total"] == kRows);
  CHECK(state["dataset"] == kDataset);

  // Bytes written after the last recorded page (a crash mid-append) are dropped, not trusted.
  { std::ofstream(part, std::ios::app) << "{\"text\": \"half a ro"; }
  o.on_page = nullptr;
  const FetchResult done = fetch_recall_source(fixture_source(), o);
  CHECK(done.status == "fetched");
  CHECK(done.requests == 2);
  CHECK(offsets_asked(server) == std::vector<int>{0, 100, 200});
  CHECK(slurp(dir.path / "fda.jsonl") == expected_jsonl());
  CHECK(log.str().find("resuming at row 100 of 250") != std::string::npos);
  CHECK(log.str().find("dropped") != std::string::npos);
  CHECK(log.str().find("restarting") == std::string::npos);
}

TEST_CASE("data fetch: a .part whose progress record disagrees is restarted, saying so", "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  HttpTestServer server(serve_rows);
  TempDir dir("fetch_restart");
  const fs::path part = dir.path / "fda.jsonl.part";
  std::ostringstream log;
  const FetchOptions o = options_for(server, dir.path, &log);

  SECTION("another dataset's") {
    { std::ofstream(part) << "{\"x\": 1}\n"; }
    {
      std::ofstream(part.string() + ".json") << json{
          {"dataset", "someone/else"}, {"config", "default"}, {"split", "validation"}, {"rows", 1}, {"bytes", 9},
          {"num_rows_total", 5}}.dump();
    }
  }
  SECTION("a row count the .part does not have") {
    { std::ofstream(part) << "{\"x\": 1}\n"; }
    {
      std::ofstream(part.string() + ".json")
          << json{{"dataset", kDataset}, {"config", "default"}, {"split", "validation"},
                  {"rows", 2},           {"bytes", 9},          {"num_rows_total", kRows}}
                 .dump();
    }
  }
  SECTION("no progress record") {
    { std::ofstream(part) << "{\"x\": 1}\n"; }
  }
  const FetchResult r = fetch_recall_source(fixture_source(), o);
  CHECK(r.status == "fetched");
  CHECK(r.requests == 3);
  CHECK(log.str().find("restarting from row 0") != std::string::npos);
  CHECK(slurp(dir.path / "fda.jsonl") == expected_jsonl());
}

TEST_CASE("data fetch: truncated cells, gaps in row_idx and partial exports are errors", "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  std::string fault;
  HttpTestServer server([&](const HttpRequest& r) {
    HttpReply reply = serve_rows(r);
    if (r.params.at("offset") != "100") return reply;
    auto page = nlohmann::ordered_json::parse(reply.body);
    if (fault == "truncated") page["rows"][7]["truncated_cells"] = {"text"};
    if (fault == "gap") page["rows"].erase(3);
    if (fault == "partial") page["partial"] = true;
    reply.body = page.dump();
    return reply;
  });
  TempDir dir("fetch_faults");
  const FetchOptions o = options_for(server, dir.path);
  fault = "truncated";
  REQUIRE_THROWS_WITH(fetch_recall_source(fixture_source(), o),
                      Catch::Contains("truncated cell(s) text of row 107") && Catch::Contains("Parquet"));
  fault = "gap";
  REQUIRE_THROWS_WITH(fetch_recall_source(fixture_source(), o),
                      Catch::Contains("rows[3] has row_idx 104, expected 103"));
  fault = "partial";
  REQUIRE_THROWS_WITH(fetch_recall_source(fixture_source(), o), Catch::Contains("\"partial\": true"));
  CHECK_FALSE(fs::exists(dir.path / "fda.jsonl"));
  CHECK(lines_in(dir.path / "fda.jsonl.part") == 100);  // the good first page stays for the resume
}

TEST_CASE("data fetch: HF_TOKEN goes in an Authorization header", "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  HttpTestServer server(serve_rows);
  TempDir dir("fetch_token");
  ::setenv("HF_TOKEN", "hf_test_token", 1);
  const auto results = fetch_recall({fixture_source("nq")}, options_for(server, dir.path));
  ::unsetenv("HF_TOKEN");
  REQUIRE(results.size() == 1);
  CHECK(results[0].status == "fetched");
  for (const HttpRequest& r : server.log()) CHECK(r.headers.at("authorization") == "Bearer hf_test_token");
  CHECK(fs::exists(dir.path / "nq.jsonl"));
}

TEST_CASE("data fetch: the CLI fetches into <data dir>/eval/recall and names bad input", "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  HttpTestServer server(serve_rows);
  TempDir dir("fetch_cli");
  const std::string common = " --dataset fda=" + std::string(kDataset) + " --endpoint " + server.url();

  auto ok = mnemo::test::run_mnemo("data fetch recall --tasks fda" + common + " --data-dir " + dir.path.string());
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  const fs::path file = dir.path / "eval" / "recall" / "fda.jsonl";
  CHECK(slurp(file) == expected_jsonl());
  CHECK(ok.output.find("\"status\":\"fetched\"") != std::string::npos);
  auto again =
      mnemo::test::run_mnemo("data fetch recall --tasks fda" + common + " --out " + file.parent_path().string());
  CHECK(again.exit_code == 0);
  CHECK(again.output.find("up to date") != std::string::npos);
  CHECK(server.requests() == 3);

  auto unknown =
      mnemo::test::run_mnemo("data fetch recall --tasks fda,nosuch" + common + " --out " + dir.path.string());
  CHECK(unknown.exit_code == 1);
  CHECK(unknown.output.find("mnemo: error: unknown recall task 'nosuch' (known: fda, swde, squad_completion, "
                            "triviaqa, nq, drop)") != std::string::npos);
  auto page = mnemo::test::run_mnemo("data fetch recall --page-size 101" + common + " --out " + dir.path.string());
  CHECK(page.exit_code == 1);
  CHECK(page.output.find("--page-size must be in [1, 100]") != std::string::npos);
  auto bad_dataset = mnemo::test::run_mnemo("data fetch recall --dataset nq" + common + " --out " + dir.path.string());
  CHECK(bad_dataset.exit_code == 1);
  CHECK(bad_dataset.output.find("--dataset expects TASK=OWNER/NAME") != std::string::npos);
  auto missing =
      mnemo::test::run_mnemo("data fetch recall --tasks swde" + common + " --retry-wait 0 --out " + dir.path.string());
  CHECK(missing.exit_code == 1);  // swde asks for hazyresearch/based-swde-v2, which the fixture server does not have
  CHECK(missing.output.find("mnemo: error: fetching swde (hazyresearch/based-swde-v2, config default, split "
                            "validation): GET " +
                            server.url() + "/rows?dataset=hazyresearch/based-swde-v2") != std::string::npos);
  CHECK(server.requests() == 4);
}

TEST_CASE("data fetch: every retry is a line, and a stalled server is abandoned after --stall-timeout", "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  int stalls_left = 1;  // the handler runs on the server thread, one request at a time
  HttpTestServer server([&](const HttpRequest& r) {
    if (r.params.count("offset") && r.params.at("offset") == "100" && stalls_left > 0) {
      --stalls_left;
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // accepted, then nothing
      return error_reply(500, "too late");
    }
    if (r.params.count("offset") && r.params.at("offset") == "200" && stalls_left == 0) {
      stalls_left = -1;
      return error_reply(503, "busy");
    }
    return serve_rows(r);
  });
  TempDir dir("fetch_stall");
  std::ostringstream log;
  FetchOptions o = options_for(server, dir.path, &log);
  o.http.low_speed_time_s = 1;
  const double t0 = wall_seconds();
  const FetchResult r = fetch_recall_source(fixture_source(), o);
  CHECK(wall_seconds() - t0 < 10);  // not 60 s per stalled attempt
  CHECK(r.status == "fetched");
  CHECK(slurp(dir.path / "fda.jsonl") == expected_jsonl());
  CAPTURE(log.str());
  CHECK_THAT(log.str(), Catch::Contains("fda: fetching fda (") && Catch::Contains(server.url()));
  CHECK_THAT(log.str(), Catch::Contains("offset=100") && Catch::Contains("retrying in 0.0 s (attempt 2 of 3)") &&
                            Catch::Contains("the server sent nothing for 1 s (stalled"));
  CHECK_THAT(log.str(), Catch::Contains("offset=200") && Catch::Contains("HTTP 503"));

  // No retries left: one error that names the stall and the option.
  stalls_left = 1;
  TempDir dir2("fetch_stall_fail");
  FetchOptions once = options_for(server, dir2.path);
  once.http.low_speed_time_s = 1;
  once.http.max_retries = 0;
  CHECK_THROWS_WITH(fetch_recall_source(fixture_source(), once),
                    Catch::Contains("stalled") && Catch::Contains("--stall-timeout") &&
                        Catch::Contains((dir2.path / "fda.jsonl.part").string()));
}

TEST_CASE("data fetch: a stop before the first page does not claim a .part that is not there", "[data_fetch]") {
  SKIP_WITHOUT_CURL();
  no_proxy_for_loopback();
  HttpTestServer server(serve_rows);
  TempDir dir("fetch_stop_early");
  std::ostringstream log;
  request_stop(SIGINT);
  const FetchResult early = fetch_recall_source(fixture_source(), options_for(server, dir.path, &log));
  clear_stop_request();
  CHECK(early.status == "stopped");
  CHECK_FALSE(fs::exists(dir.path / "fda.jsonl.part"));
  CHECK_THAT(log.str(), Catch::Contains("nothing was downloaded yet") && !Catch::Contains(".part is kept"));
}
