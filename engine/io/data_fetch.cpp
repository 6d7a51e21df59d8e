#include "engine/io/data_fetch.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/signals.h"

namespace mnemo {
namespace fs = std::filesystem;

namespace {

// The row objects keep the API's key order.
using ojson = nlohmann::ordered_json;

const char* kChecksums = "CHECKSUMS.json";

std::string source_label(const RecallSource& s) {
  return s.task + " (" + s.dataset + ", config " + s.config + ", split " + s.split + ")";
}

// Number of '\n' in the first `bytes` bytes of `path`, and whether the last of them is a '\n'.
std::pair<int64_t, bool> count_lines(const fs::path& path, int64_t bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path.string());
  std::vector<char> buf(1 << 20);
  int64_t lines = 0, left = bytes;
  char last = '\n';
  while (left > 0) {
    in.read(buf.data(), std::min<int64_t>(left, buf.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    for (std::streamsize i = 0; i < n; ++i) lines += buf[i] == '\n';
    last = buf[n - 1];
    left -= n;
  }
  return {lines, last == '\n'};
}

std::string rows_url(const FetchOptions& o, const RecallSource& s, int64_t offset, int64_t length) {
  std::string base = o.endpoint;
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string url = base + "/rows?dataset=" + url_encode(s.dataset) + "&config=" + url_encode(s.config) +
                    "&split=" + url_encode(s.split);
  if (offset >= 0) url += "&offset=" + std::to_string(offset) + "&length=" + std::to_string(length);
  return url;
}

json read_checksums(const fs::path& dir) {
  const fs::path p = dir / kChecksums;
  if (!fs::exists(p)) return json::object();
  json j = read_json_file(p.string());
  if (!j.is_object()) throw Error(p.string() + ": expected a JSON object keyed by task name");
  return j;
}

// What the user can do about a failed request.
std::string http_hint(const HttpError& e, const RecallSource& s) {
  const bool token = std::getenv("HF_TOKEN") && *std::getenv("HF_TOKEN");
  const std::string page = "https://huggingface.co/datasets/" + s.dataset;
  if (e.status == 401 || e.status == 403 || e.error_code == "ExternalUnauthenticatedError" ||
      e.error_code == "ExternalAuthenticatedError")
    return token ? "HF_TOKEN is set: check that its account has access to " + page +
                       ", where a gated dataset's terms must be accepted"
                 : "if the dataset is gated or private, accept its terms on " + page +
                       " and set HF_TOKEN to a Hugging Face access token";
  if (e.status == 404)
    return "check the dataset name, --config and --split against " + page +
           (token ? std::string() : "; a gated or private dataset also answers 404 without HF_TOKEN");
  if (e.status == 422) return "the API rejected the request's parameters; --page-size must be 1..100";
  if (e.error_code == "TooBigContentError") return "the page is too large for the API: try a smaller --page-size";
  if (e.error_code == "ResponseNotReady") return "the dataset viewer is still preparing this dataset: try again later";
  if (e.status == 0 && std::string(e.what()).find("(stalled;") != std::string::npos)
    return "the server accepted the connection but sent nothing; --stall-timeout SECONDS sets how long to wait";
  if (e.status == 0) return "check the network connection and --endpoint";
  return "";
}

struct PartState {
  int64_t rows = 0;
  int64_t bytes = 0;
  int64_t total = -1;  // num_rows_total, once known
};

json state_json(const RecallSource& s, const PartState& st) {
  return json{{"task", s.task},
              {"dataset", s.dataset},
              {"config", s.config},
              {"split", s.split},
              {"rows", st.rows},
              {"bytes", st.bytes},
              {"num_rows_total", st.total < 0 ? json(nullptr) : json(st.total)}};
}

void log_line(const FetchOptions& o, const std::string& line) {
  if (o.log) *o.log << line << "\n" << std::flush;
}

// Resumes from an earlier run's .part when its state agrees with it; otherwise starts afresh (saying why).
PartState resume_state(const RecallSource& s, const fs::path& part, const fs::path& state_path, const FetchOptions& o) {
  const bool have_part = fs::exists(part), have_state = fs::exists(state_path);
  auto restart = [&](const std::string& why) {
    log_line(o, s.task + ": restarting from row 0: " + why);
    fs::remove(part);
    fs::remove(state_path);
    return PartState{};
  };
  if (!have_state && (!have_part || fs::file_size(part) == 0)) {  // nothing begun (an empty .part holds nothing)
    fs::remove(part);
    return PartState{};
  }
  if (!have_state) return restart(part.string() + " has no progress record " + state_path.filename().string());
  if (!have_part) {
    // A record of zero rows needs no .part (a stop before the first page); one of more rows has lost them.
    const json st = json::parse(read_text_file(state_path.string()), nullptr, false);
    if (st.is_object() && st.contains("rows") && st["rows"].is_number_integer() && st["rows"].get<int64_t>() == 0) {
      fs::remove(state_path);
      return PartState{};
    }
    return restart(state_path.string() + " has no " + part.filename().string());
  }
  json st;
  try {
    st = read_json_file(state_path.string());
  } catch (const Error& e) {
    return restart(e.what());
  }
  PartState p;
  try {
    if (st.at("dataset").get<std::string>() != s.dataset || st.at("config").get<std::string>() != s.config ||
        st.at("split").get<std::string>() != s.split)
      return restart(state_path.string() + " is for " + st.at("dataset").get<std::string>() + " (config " +
                     st.at("config").get<std::string>() + ", split " + st.at("split").get<std::string>() +
                     "), not this source");
    p.rows = st.at("rows").get<int64_t>();
    p.bytes = st.at("bytes").get<int64_t>();
    p.total = st.at("num_rows_total").is_null() ? -1 : st.at("num_rows_total").get<int64_t>();
  } catch (const json::exception& e) {
    return restart(state_path.string() + " is malformed (" + e.what() + ")");
  }
  if (p.rows < 0 || p.bytes < 0) return restart(state_path.string() + " has negative counts");
  const int64_t size = static_cast<int64_t>(fs::file_size(part));
  if (size < p.bytes)
    return restart(part.string() + " has " + std::to_string(size) + " bytes, fewer than the " +
                   std::to_string(p.bytes) + " its progress record counts");
  const auto [lines, ends_clean] = count_lines(part, p.bytes);
  if (lines != p.rows || !ends_clean)
    return restart(part.string() + " has " + std::to_string(lines) + " complete rows in its first " +
                   std::to_string(p.bytes) + " bytes, not the " + std::to_string(p.rows) +
                   " its progress record counts");
  if (size > p.bytes) {  // a page written after the last recorded one, before its record: not trusted, dropped
    fs::resize_file(part, p.bytes);
    log_line(o, s.task + ": dropped " + std::to_string(size - p.bytes) + " bytes of " + part.string() +
                    " written after its last progress record");
  }
  if (p.rows > 0)
    log_line(o, s.task + ": resuming at row " + std::to_string(p.rows) +
                    (p.total >= 0 ? " of " + std::to_string(p.total) : std::string()) + " from " + part.string());
  return p;
}

}  // namespace

const std::vector<RecallSource>& recall_sources() {
  // The Based / JRT evaluation suite's datasets (HazyResearch/prefix-linear-attention, lm-eval-harness/lm_eval/tasks/
  // based_*): config "default" (named so for FDA, SWDE, SQuAD; the only one of the others), split "validation".
  static const std::vector<RecallSource> sources = {
      {"fda", "hazyresearch/based-fda", "default", "validation"},
      {"swde", "hazyresearch/based-swde-v2", "default", "validation"},
      {"squad_completion", "hazyresearch/based-squad", "default", "validation"},
      {"triviaqa", "hazyresearch/based_triviaqa", "default", "validation"},
      {"nq", "hazyresearch/based_nq_2048", "default", "validation"},
      {"drop", "hazyresearch/based_drop", "default", "validation"},
  };
  return sources;
}

RecallSource recall_source(const std::string& task) {
  std::string known;
  for (const RecallSource& s : recall_sources()) {
    if (s.task == task) return s;
    known += (known.empty() ? "" : ", ") + s.task;
  }
  throw Error("unknown recall task '" + task + "' (known: " + known + ")");
}

FetchResult fetch_recall_source(const RecallSource& s, const FetchOptions& o) {
  if (o.page_size < 1 || o.page_size > 100)
    throw Error("--page-size must be in [1, 100] (the rows API's limit), got " + std::to_string(o.page_size));
  if (o.out_dir.empty()) throw Error("fetch_recall_source: no output folder");
  const fs::path dir = o.out_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create " + dir.string() + ": " + ec.message());
  const fs::path final_path = dir / (s.task + ".jsonl");
  const fs::path part = final_path.string() + ".part";
  const fs::path state_path = part.string() + ".json";

  FetchResult result;
  result.task = s.task;
  result.file = final_path.string();

  json checksums = read_checksums(dir);
  const fs::path checksums_path = dir / kChecksums;
  if (!o.force && fs::exists(final_path)) {
    if (!checksums.contains(s.task))
      throw Error(final_path.string() + " exists but has no record in " + checksums_path.string() +
                  " (not fetched by mnemo, or the record was lost): move it away, or use --force to fetch it again");
    const json& rec = checksums[s.task];
    const auto field = [&](const char* k) {
      return rec.contains(k) && rec[k].is_string() ? rec[k].get<std::string>() : "";
    };
    if (field("dataset") != s.dataset || field("config") != s.config || field("split") != s.split)
      throw Error(final_path.string() + " holds " + field("dataset") + " (config " + field("config") + ", split " +
                  field("split") + ") by " + checksums_path.string() + ", not " + s.dataset + " (config " + s.config +
                  ", split " + s.split + "): use --force to replace it");
    const std::string sha = sha256_hex(read_text_file(final_path.string()));
    if (sha != field("sha256"))
      throw Error(final_path.string() + ": sha256 " + sha + " differs from the one recorded in " +
                  checksums_path.string() + " (" + field("sha256") +
                  "): the file was changed or is damaged; use --force to fetch it again");
    result.status = "up to date";
    result.sha256 = sha;
    result.rows = result.rows_total = rec.value("rows", int64_t(0));
    log_line(o, s.task + ": up to date (" + final_path.string() + ", sha256 " + sha.substr(0, 12) + "...)");
    return result;
  }

  PartState st = resume_state(s, part, state_path, o);
  log_line(o, s.task + ": fetching " + source_label(s) + " from " + o.endpoint);
  HttpOptions http = o.http;  // every retry says so (the default five take ~31 s of backoff)
  if (!http.on_retry) http.on_retry = [&](const std::string& why) { log_line(o, s.task + ": " + why); };
  const double t0 = wall_seconds();
  const int64_t rows_at_start = st.rows;
  auto context = [&](const std::string& what) {
    return "fetching " + source_label(s) + ": " + what +
           (st.rows > 0 ? "; " + part.string() + " keeps the " + std::to_string(st.rows) +
                              " rows before it: the same command resumes there"
                        : std::string());
  };

  while (st.total < 0 || st.rows < st.total) {
    if (stop_requested()) break;
    const int64_t length = st.total < 0 ? o.page_size : std::min<int64_t>(o.page_size, st.total - st.rows);
    const std::string url = rows_url(o, s, st.rows, length);
    HttpResponse resp;
    try {
      resp = http_get(url, http);
      result.requests += resp.attempts;
    } catch (const HttpError& e) {
      if (e.stopped) break;
      const std::string hint = http_hint(e, s);
      throw Error(context(std::string(e.what()) + (hint.empty() ? "" : "; " + hint)));
    }
    ojson page;
    try {
      page = ojson::parse(resp.body);
    } catch (const ojson::exception& e) {
      std::string what = e.what();  // "[json.exception.parse_error.101] parse error at ...; last read: '<data>'"
      if (const size_t p = what.find("] "); what.rfind("[json.exception.", 0) == 0 && p != std::string::npos)
        what = what.substr(p + 2);
      if (const size_t p = what.find("; last read"); p != std::string::npos) what = what.substr(0, p);
      throw Error(context("GET " + url + ": the response (" + std::to_string(resp.body.size()) +
                          " bytes) is not valid JSON, truncated or garbled: " + what + "; the page was not written"));
    }
    if (!page.is_object() || !page.contains("rows") || !page["rows"].is_array() || !page.contains("num_rows_total") ||
        !page["num_rows_total"].is_number_integer())
      throw Error(
          context("GET " + url +
                  ": not a rows-API page (expected an object with \"rows\" (array) and \"num_rows_total\" (integer))"));
    if (page.value("partial", false))
      throw Error(
          context("GET " + url +
                  ": the API serves only part of this split (\"partial\": true), so the file "
                  "would be incomplete; download the split's Parquet files from https://huggingface.co/datasets/" +
                  s.dataset + " instead"));
    const int64_t total = page["num_rows_total"].get<int64_t>();
    if (total < 0) throw Error(context("GET " + url + ": negative num_rows_total " + std::to_string(total)));
    if (st.total >= 0 && total != st.total) {  // the dataset changed since the .part was begun
      log_line(o, s.task + ": restarting from row 0: num_rows_total is now " + std::to_string(total) + ", was " +
                      std::to_string(st.total) + " when " + part.string() + " was begun");
      fs::resize_file(part, 0);
      st = PartState{};
      st.total = total;
      write_file_atomic(state_path, state_json(s, st).dump() + "\n");
      continue;
    }
    st.total = total;
    const ojson& rows = page["rows"];
    if (st.rows >= total) break;  // an empty split (the first page says so)
    if (rows.empty())
      throw Error(context("GET " + url + ": no rows at offset " + std::to_string(st.rows) + " of num_rows_total " +
                          std::to_string(total)));
    if (static_cast<int64_t>(rows.size()) > std::min<int64_t>(length, total - st.rows))
      throw Error(context("GET " + url + ": " + std::to_string(rows.size()) + " rows, more than the " +
                          std::to_string(std::min<int64_t>(length, total - st.rows)) + " asked for"));
    std::string text;
    for (size_t i = 0; i < rows.size(); ++i) {
      const ojson& r = rows[i];
      const int64_t want = st.rows + static_cast<int64_t>(i);
      if (!r.is_object() || !r.contains("row_idx") || !r["row_idx"].is_number_integer() || !r.contains("row") ||
          !r["row"].is_object())
        throw Error(context("GET " + url + ": rows[" + std::to_string(i) +
                            "] is not {\"row_idx\": integer, \"row\": object, ...}"));
      if (r["row_idx"].get<int64_t>() != want)
        throw Error(context("GET " + url + ": rows[" + std::to_string(i) + "] has row_idx " +
                            std::to_string(r["row_idx"].get<int64_t>()) + ", expected " + std::to_string(want) +
                            " (rows must come contiguous, in order)"));
      if (r.contains("truncated_cells") && r["truncated_cells"].is_array() && !r["truncated_cells"].empty()) {
        std::string cells;
        for (const ojson& c : r["truncated_cells"])
          cells += (cells.empty() ? "" : ", ") + (c.is_string() ? c.get<std::string>() : c.dump());
        throw Error(context("GET " + url + ": the API truncated cell(s) " + cells + " of row " + std::to_string(want) +
                            " (truncated_cells), so the row would be incomplete; try again later, or download the "
                            "split's Parquet files from https://huggingface.co/datasets/" +
                            s.dataset + " instead"));
      }
      try {
        text += r["row"].dump() + "\n";
      } catch (const ojson::exception& e) {
        throw Error(
            context("GET " + url + ": row " + std::to_string(want) + " cannot be written as JSON (" + e.what() + ")"));
      }
    }
    {  // every write checked; a page cut short by a full disk lies beyond the recorded byte count, which resume trims
      const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) throw Error(context("cannot append to " + part.string() + ": " + std::strerror(errno)));
      try {
        write_all(fd, text.data(), text.size(), part.string());
        if (::fsync(fd) != 0) throw Error("cannot write " + part.string() + ": " + std::strerror(errno));
      } catch (const Error& e) {
        ::close(fd);
        throw Error(context(e.what()));
      }
      if (::close(fd) != 0) throw Error(context("cannot write " + part.string() + ": " + std::strerror(errno)));
    }
    st.rows += static_cast<int64_t>(rows.size());
    st.bytes += static_cast<int64_t>(text.size());
    write_file_atomic(state_path, state_json(s, st).dump() + "\n");
    const double dt = std::max(1e-9, wall_seconds() - t0);
    std::ostringstream line;
    line << s.task << ": " << st.rows << "/" << st.total << " rows (" << std::fixed << std::setprecision(0)
         << (st.rows - rows_at_start) / dt << " rows/s)";
    log_line(o, line.str());
    if (o.on_page) o.on_page(st.rows, st.total);
  }

  result.rows = st.rows;
  result.rows_total = st.total;
  if (st.total < 0 || st.rows < st.total) {  // a stop request
    write_file_atomic(state_path, state_json(s, st).dump() + "\n");
    result.status = "stopped";
    // Name the file that is there: before the first page there is no .part, only its progress record.
    const bool have_part = fs::exists(part, ec) && st.rows > 0;
    log_line(o, s.task + ": stopped at " + std::to_string(st.rows) + "/" +
                    (st.total < 0 ? std::string("?") : std::to_string(st.total)) + " rows; " +
                    (have_part ? part.string() + " is kept and the same command resumes there"
                               : "nothing was downloaded yet (" + state_path.string() +
                                     " records the start); the same command begins again"));
    return result;
  }

  // Complete: check the .part as a whole, record its checksum, then give it its final name.
  if (!fs::exists(part)) std::ofstream(part, std::ios::binary).flush();  // an empty split
  const int64_t size = static_cast<int64_t>(fs::file_size(part));
  const auto [lines, ends_clean] = count_lines(part, size);
  if (size != st.bytes || lines != st.total || !ends_clean)
    throw Error(part.string() + " has " + std::to_string(lines) + " rows in " + std::to_string(size) +
                " bytes, expected " + std::to_string(st.total) + " rows in " + std::to_string(st.bytes) +
                " bytes (changed while fetching?); delete it and its .json to fetch again");
  const std::string sha = sha256_hex(read_text_file(part.string()));
  checksums = read_checksums(dir);  // re-read: another task's record may have been written meanwhile
  checksums[s.task] = json{{"file", final_path.filename().string()},
                           {"dataset", s.dataset},
                           {"config", s.config},
                           {"split", s.split},
                           {"rows", st.total},
                           {"bytes", st.bytes},
                           {"sha256", sha},
                           {"source", rows_url(o, s, -1, 0)},
                           {"fetched_at", now_iso8601()}};
  write_file_atomic(checksums_path, checksums.dump(2) + "\n");
  fs::rename(part, final_path, ec);
  if (ec) throw Error("cannot rename " + part.string() + " to " + final_path.string() + ": " + ec.message());
  fs::remove(state_path, ec);
  result.status = "fetched";
  result.sha256 = sha;
  log_line(o, s.task + ": " + std::to_string(st.total) + " rows -> " + final_path.string() + " (sha256 " +
                  sha.substr(0, 12) + "...)");
  return result;
}

std::vector<FetchResult> fetch_recall(const std::vector<RecallSource>& sources, FetchOptions options) {
  if (const char* token = std::getenv("HF_TOKEN"); token && *token)
    options.http.headers.push_back(std::string("Authorization: Bearer ") + token);
  std::vector<FetchResult> results;
  for (const RecallSource& s : sources) {
    results.push_back(fetch_recall_source(s, options));
    if (results.back().status == "stopped") break;
  }
  return results;
}

}  // namespace mnemo
