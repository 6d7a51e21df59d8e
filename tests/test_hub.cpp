// `mnemo hub download` and `--checkpoint hf:OWNER/NAME` (engine/io/hub.h) against a local HTTP server on 127.0.0.1
// that answers as the Hugging Face Hub does (the model API with ?blobs=true, /resolve/ with ranges), serving the
// files of tests/data/fla_models/gla_llama2_tokenizer (a model saved by fla's own code); never the internet.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/http.h"
#include "engine/io/hub.h"
#include "file_util.h"
#include "http_test_server.h"
#include "test_util.h"

using namespace mnemo;
using mnemo::test::HttpReply;
using mnemo::test::HttpRequest;
using mnemo::test::HttpTestServer;
namespace fs = std::filesystem;

namespace {

#define SKIP_WITHOUT_CURL()                                              \
  if (!http_available()) {                                               \
    WARN("skipped: this build has no libcurl (cmake -DMNEMO_CURL=OFF)"); \
    return;                                                              \
  }

const std::string kRepo = "test-org/tiny-gla";
const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

std::string slurp_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The repository: the fixture folder's files; model.safetensors is an LFS file (its sha256 listed), the others are
// plain git files (blob ids).
struct FixtureRepo {
  std::map<std::string, std::string> files;
  std::string corrupt;         // a file served with one byte changed
  std::string cut_once;        // a file whose first answer breaks off halfway
  int status_once = 0;         // the API's first answer is this status (429: then 200)
  int api_status = 200;        // every API answer (401, 404)
  std::string api_error_code;  // X-Error-Code of a failing API answer
  std::mutex mu;

  FixtureRepo() {
    const fs::path dir = fs::path(MNEMO_SOURCE_DIR) / "tests" / "data" / "fla_models" / "gla_llama2_tokenizer";
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) files[f] = slurp_file(dir / f);
  }

  static std::string blob_id(const std::string& bytes) { return sha256_hex("blob " + bytes).substr(0, 40); }

  json listing() const {
    json siblings = json::array();
    for (const auto& [name, bytes] : files) {
      json s = {{"rfilename", name}, {"blobId", blob_id(bytes)}, {"size", bytes.size()}};
      if (name == "model.safetensors")
        s["lfs"] = {{"sha256", sha256_hex(bytes)}, {"size", bytes.size()}, {"pointerSize", 134}};
      siblings.push_back(s);
    }
    return {{"id", kRepo}, {"sha", kCommit}, {"siblings", siblings}};
  }

  HttpReply answer(const HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu);
    const std::string api = "/api/models/" + kRepo + "/revision/";
    if (r.path.rfind(api, 0) == 0) {
      if (status_once) {
        const int s = status_once;
        status_once = 0;
        return {s, R"({"error":"slow down"})", {"Retry-After: 0"}};
      }
      if (api_status != 200)
        return {api_status, R"({"error":"Repository not found"})",
                api_error_code.empty() ? std::vector<std::string>{} : std::vector<std::string>{"X-Error-Code: " + api_error_code}};
      if (r.path.substr(api.size()) != "main" && r.path.substr(api.size()) != kCommit)
        return {404, R"({"error":"Invalid rev id"})", {"X-Error-Code: RevisionNotFound"}};
      if (r.params.count("blobs") == 0) return {400, R"({"error":"test server: ask with ?blobs=true"})"};
      return {200, listing().dump()};
    }
    const std::string resolve = "/" + kRepo + "/resolve/" + kCommit + "/";
    if (r.path.rfind(resolve, 0) != 0) return {404, R"({"error":"not found"})", {"X-Error-Code: EntryNotFound"}};
    const std::string name = r.path.substr(resolve.size());
    auto it = files.find(name);
    if (it == files.end()) return {404, R"({"error":"Entry not found"})", {"X-Error-Code: EntryNotFound"}};
    std::string body = it->second;
    if (name == corrupt) body[body.size() / 2] ^= 0x5a;
    size_t from = 0;
    auto range = r.headers.find("range");
    if (range != r.headers.end() && range->second.rfind("bytes=", 0) == 0) from = std::stoul(range->second.substr(6));
    HttpReply reply{from > 0 ? 206 : 200, body.substr(from)};
    reply.headers = {"ETag: \"" + (name == "model.safetensors" ? sha256_hex(it->second) : blob_id(it->second)) + "\"",
                     "X-Repo-Commit: " + kCommit};
    if (from > 0)
      reply.headers.push_back("Content-Range: bytes " + std::to_string(from) + "-" + std::to_string(body.size() - 1) +
                              "/" + std::to_string(body.size()));
    if (name == cut_once) {
      cut_once.clear();
      reply.send_bytes = static_cast<long>(reply.body.size() / 2);
    }
    return reply;
  }
};

HubOptions options_for(const HttpTestServer& server, const fs::path& cache) {
  ::setenv("no_proxy", "127.0.0.1,localhost", 1);
  ::setenv("NO_PROXY", "127.0.0.1,localhost", 1);
  HubOptions o;
  o.endpoint = server.url();
  o.cache_dir = cache.string();
  o.http.backoff_base_s = 0;
  o.http.max_retries = 2;
  return o;
}


}  // namespace

TEST_CASE("hub download: the Hugging Face cache layout, checked files, and a second run from the cache", "[hub]") {
  SKIP_WITHOUT_CURL();
  FixtureRepo repo;
  HttpTestServer server([&](const HttpRequest& r) { return repo.answer(r); });
  test::TempDir tmp("hub_layout");
  const fs::path cache = tmp.path / "hub";
  const HubOptions o = options_for(server, cache);

  const HubDownloadResult r = hub_download(kRepo, "main", o);
  CHECK(r.commit == kCommit);
  const fs::path repo_dir = cache / "models--test-org--tiny-gla";
  CHECK(r.snapshot_dir == (repo_dir / "snapshots" / kCommit).string());
  REQUIRE(r.files.size() == 3);
  for (const HubFile& f : r.files) CHECK(f.status == "fetched");
  // blobs/<sha256> for the LFS file, blobs/<blob id> for the others; snapshots/ links to them; refs/main.
  const std::string weights_sha = sha256_hex(repo.files["model.safetensors"]);
  CHECK(slurp_file(repo_dir / "blobs" / weights_sha) == repo.files["model.safetensors"]);
  CHECK(fs::exists(repo_dir / "blobs" / FixtureRepo::blob_id(repo.files["config.json"])));
  const fs::path link = repo_dir / "snapshots" / kCommit / "model.safetensors";
  REQUIRE(fs::is_symlink(link));
  CHECK(fs::read_symlink(link) == fs::path("../../blobs") / weights_sha);
  for (const auto& [name, bytes] : repo.files) CHECK(slurp_file(repo_dir / "snapshots" / kCommit / name) == bytes);
  CHECK(slurp_file(repo_dir / "refs" / "main") == kCommit);
  for (const auto& e : fs::directory_iterator(repo_dir / "blobs"))
    CHECK(e.path().extension() != ".incomplete");

  // Again: only the listing is requested; every file comes from the cache.
  const int before = server.requests();
  const HubDownloadResult again = hub_download(kRepo, "main", o);
  CHECK(server.requests() == before + 1);
  for (const HubFile& f : again.files) CHECK(f.status == "cached");

  // --include: shell patterns over the repository's paths.
  HubOptions only_json = o;
  only_json.include = {"*.json"};
  test::TempDir tmp2("hub_include");
  only_json.cache_dir = (tmp2.path / "hub").string();
  const HubDownloadResult some = hub_download(kRepo, "main", only_json);
  REQUIRE(some.files.size() == 2);
  CHECK(!fs::exists(fs::path(some.snapshot_dir) / "model.safetensors"));
  only_json.include = {"*.bin"};
  CHECK_THROWS_WITH(hub_download(kRepo, "main", only_json), Catch::Contains("no file matches --include *.bin"));
}

TEST_CASE("hub download: a partial file continues with a range request, and a transfer cut short is resumed", "[hub]") {
  SKIP_WITHOUT_CURL();
  FixtureRepo repo;
  HttpTestServer server([&](const HttpRequest& r) { return repo.answer(r); });
  test::TempDir tmp("hub_resume");
  const fs::path cache = tmp.path / "hub";
  HubOptions o = options_for(server, cache);
  const std::string& weights = repo.files["model.safetensors"];
  const fs::path blobs = cache / "models--test-org--tiny-gla" / "blobs";
  fs::create_directories(blobs);
  {
    std::ofstream part(blobs / (sha256_hex(weights) + ".incomplete"), std::ios::binary);
    part << weights.substr(0, 1000);
  }
  o.include = {"model.safetensors"};
  hub_download(kRepo, "main", o);
  CHECK(slurp_file(blobs / sha256_hex(weights)) == weights);
  bool ranged = false;
  for (const auto& r : server.log())
    if (r.path.find("model.safetensors") != std::string::npos) ranged = r.headers.count("range") && r.headers.at("range") == "bytes=1000-";
  CHECK(ranged);

  // The server breaks off halfway: the retry asks for the rest, and the file is whole and checked.
  test::TempDir tmp2("hub_cut");
  o.cache_dir = (tmp2.path / "hub").string();
  repo.cut_once = "model.safetensors";
  std::vector<std::string> retries;
  o.http.on_retry = [&](const std::string& line) { retries.push_back(line); };
  const HubDownloadResult r = hub_download(kRepo, "main", o);
  CHECK(slurp_file(fs::path(r.snapshot_dir) / "model.safetensors") == weights);
  REQUIRE(retries.size() == 1);
  CHECK(retries[0].find("from byte " + std::to_string(weights.size() / 2)) != std::string::npos);
}

TEST_CASE("hub download: a sha256 mismatch, 401, 404 and 429 each end in one clear outcome", "[hub]") {
  SKIP_WITHOUT_CURL();
  FixtureRepo repo;
  HttpTestServer server([&](const HttpRequest& r) { return repo.answer(r); });
  test::TempDir tmp("hub_errors");
  const fs::path cache = tmp.path / "hub";
  const HubOptions o = options_for(server, cache);
  const fs::path blobs = cache / "models--test-org--tiny-gla" / "blobs";

  repo.corrupt = "model.safetensors";
  CHECK_THROWS_WITH(hub_download(kRepo, "main", o),
                    Catch::Contains("model.safetensors: sha256") && Catch::Contains("differs from the Hub's"));
  for (const auto& e : fs::directory_iterator(blobs)) CHECK(e.path().filename().string().rfind(sha256_hex(repo.files["model.safetensors"]), 0) != 0);
  CHECK(!fs::exists(cache / "models--test-org--tiny-gla" / "snapshots" / kCommit / "model.safetensors"));
  repo.corrupt.clear();

  repo.status_once = 429;  // retried after Retry-After, then fine
  CHECK(hub_download(kRepo, "main", o).files.size() == 3);

  repo.api_status = 401;
  CHECK_THROWS_WITH(hub_download(kRepo, "main", o), Catch::Contains("HTTP 401") && Catch::Contains("HF_TOKEN"));
  repo.api_status = 404;
  repo.api_error_code = "RepoNotFound";
  CHECK_THROWS_WITH(hub_download(kRepo, "main", o), Catch::Contains("no model repository test-org/tiny-gla"));
  repo.api_status = 200;
  CHECK_THROWS_WITH(hub_download(kRepo, "v9", o), Catch::Contains("no revision 'v9'"));
  CHECK_THROWS_WITH(hub_download("not a repo", "main", o), Catch::Contains("is not a model repository id"));
  CHECK_THROWS_WITH(hub_download("a/../b", "main", o), Catch::Contains("is not a model repository id"));
}

TEST_CASE("hub download: HF_HUB_OFFLINE reads the cache only, HF_TOKEN is sent, the environment picks the cache",
          "[hub]") {
  SKIP_WITHOUT_CURL();
  FixtureRepo repo;
  HttpTestServer server([&](const HttpRequest& r) { return repo.answer(r); });
  test::TempDir tmp("hub_offline");
  HubOptions o = options_for(server, tmp.path / "hub");
  o.token = "hf_secret";
  hub_download(kRepo, "main", o);
  for (const auto& r : server.log()) CHECK(r.headers.at("authorization") == "Bearer hf_secret");

  const int before = server.requests();
  HubOptions offline = o;
  offline.offline = true;
  const HubDownloadResult r = hub_download(kRepo, "main", offline);
  CHECK(server.requests() == before);
  CHECK(r.commit == kCommit);
  CHECK(r.files.size() == 3);
  CHECK(hub_download(kRepo, kCommit, offline).files.size() == 3);
  offline.cache_dir = (tmp.path / "empty").string();
  CHECK_THROWS_WITH(hub_download(kRepo, "main", offline),
                    Catch::Contains("HF_HUB_OFFLINE=1") && Catch::Contains("not in the cache"));

  // The environment, as huggingface_hub reads it.
  ::setenv("HF_HOME", (tmp.path / "hf_home").c_str(), 1);
  ::unsetenv("HF_HUB_CACHE");
  ::setenv("HF_ENDPOINT", "http://127.0.0.1:9/", 1);
  ::setenv("HF_HUB_OFFLINE", "1", 1);
  ::unsetenv("HF_TOKEN");
  fs::create_directories(tmp.path / "hf_home");
  std::ofstream(tmp.path / "hf_home" / "token") << "hf_from_file\n";
  const HubOptions env = hub_options_from_environment();
  CHECK(env.cache_dir == (tmp.path / "hf_home" / "hub").string());
  CHECK(env.endpoint == "http://127.0.0.1:9");
  CHECK(env.offline);
  CHECK(env.token == "hf_from_file");
  for (const char* v : {"HF_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE"}) ::unsetenv(v);
}

TEST_CASE("mnemo hub download and eval --checkpoint hf:OWNER/NAME run end to end on the local hub", "[hub][cli]") {
  SKIP_WITHOUT_CURL();
  FixtureRepo repo;
  HttpTestServer server([&](const HttpRequest& r) { return repo.answer(r); });
  test::TempDir tmp("hub_cli");
  const std::string env = "HF_ENDPOINT=" + server.url() + " HF_HUB_CACHE=" + (tmp.path / "hub").string() +
                          " no_proxy=127.0.0.1 NO_PROXY=127.0.0.1";
  auto dl = test::run_mnemo_env(env, "hub download " + kRepo + " --include '*.json' --retry-wait 0");
  INFO(dl.output);
  REQUIRE(dl.exit_code == 0);
  CHECK(dl.output.find("\"snapshot\":\"" + (tmp.path / "hub" / "models--test-org--tiny-gla" / "snapshots" / kCommit).string()) !=
        std::string::npos);

  // A tiny PIQA file: the model (fla's random GLA with the reduced Llama-2 tokenizer) scores it through the harness.
  const fs::path data = tmp.path / "data" / "eval" / "piqa";
  fs::create_directories(data);
  {
    std::ofstream f(data / "valid.jsonl");
    f << R"({"goal": "To open a jar,", "sol1": "twist the lid.", "sol2": "eat the lid."})" << "\n"
      << R"({"goal": "To cool tea,", "sol1": "boil it again.", "sol2": "wait a while."})" << "\n";
    std::ofstream(data / "valid-labels.lst") << "0\n1\n";
  }
  const std::string db = (tmp.path / "results.sqlite").string();
  auto ev = test::run_mnemo_env(env, "eval --checkpoint hf:" + kRepo + " --tasks piqa --skip-malformed --data-dir " +
                                         (tmp.path / "data").string() + " --output-path " +
                                         (tmp.path / "eval").string() + " --db " + db);
  INFO(ev.output);
  REQUIRE(ev.exit_code == 0);
  CHECK(ev.output.find("piqa") != std::string::npos);
  CHECK(fs::exists(tmp.path / "hub" / "models--test-org--tiny-gla" / "snapshots" / kCommit / "tokenizer.json"));

  // Offline, from the cache; and a repository that is not there.
  auto off = test::run_mnemo_env(env + " HF_HUB_OFFLINE=1",
                                 "eval --checkpoint hf:" + kRepo + " --tasks piqa --skip-malformed --data-dir " +
                                     (tmp.path / "data").string() + " --output-path " + (tmp.path / "eval2").string() +
                                     " --db " + db);
  INFO(off.output);
  CHECK(off.exit_code == 0);
  repo.api_status = 404;
  repo.api_error_code = "RepoNotFound";
  auto missing = test::run_mnemo_env(env, "eval --checkpoint hf:nobody/nothing --tasks piqa --db " + db);
  CHECK(missing.exit_code == 1);
  CHECK(missing.output.find("mnemo: error: hub download nobody/nothing") != std::string::npos);
}
