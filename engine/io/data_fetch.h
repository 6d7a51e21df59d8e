// `mnemo data fetch recall`: the recall-intensive QA sets (tasks docs/tasks.md#recall-intensive-qa) from the Hugging Face datasets-server
// JSON rows API, `GET {endpoint}/rows?dataset=D&config=C&split=S&offset=O&length=L` (L <= 100), one page at a time.
//
// Output: <dir>/<task>.jsonl, one line per dataset row (the API's `row` object, keys in the API's order), in row_idx
// order. While a download runs the rows go to <task>.jsonl.part, with its progress in <task>.jsonl.part.json
// (dataset, config, split, rows, bytes, num_rows_total); a later run continues from the next offset. Only a complete,
// checked file (every row, contiguous row_idx) is renamed to the final name, after its sha256 is recorded in
// <dir>/CHECKSUMS.json. A file whose sha256 matches its record is "up to date" and not fetched again.
#pragma once
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/http.h"

namespace mnemo {

struct RecallSource {
  std::string task;     // fda, swde, squad_completion, triviaqa, nq, drop (the file's name)
  std::string dataset;  // Hugging Face dataset, e.g. hazyresearch/based-fda
  std::string config;   // "default"
  std::string split;    // "validation"
};

// The six sets, in MoM Table 2's column order.
const std::vector<RecallSource>& recall_sources();
// The source of a task name; Error listing the known ones if there is none.
RecallSource recall_source(const std::string& task);

struct FetchOptions {
  std::string endpoint = "https://datasets-server.huggingface.co";
  std::string out_dir;  // the folder of the .jsonl files (the CLI's default: <data_dir>/eval/recall)
  int page_size = 100;  // rows per request, 1..100
  bool force = false;   // fetch again even when the file is up to date (a .part is still resumed)
  HttpOptions http;     // an "Authorization: Bearer $HF_TOKEN" header is added by fetch_recall when HF_TOKEN is set
  std::ostream* log = nullptr;                               // progress lines; none if null
  std::function<void(int64_t rows, int64_t total)> on_page;  // after each page is saved (tests)
};

struct FetchResult {
  std::string task;
  std::string file;
  std::string status;  // "fetched", "up to date", "stopped" (a stop request: the .part is kept and resumable)
  int64_t rows = 0;    // rows in the file (in the .part when stopped)
  int64_t rows_total = 0;
  std::string sha256;  // of the final file ("" when stopped)
  int requests = 0;    // HTTP requests made, retries included
};

// Fetches one set into options.out_dir. Throws Error naming the URL / file / row at fault; on a stop request
// (SIGINT / SIGTERM) returns with status "stopped" after the last complete page.
FetchResult fetch_recall_source(const RecallSource& source, const FetchOptions& options);

// The sets in order (stops at the first stop request); adds the HF_TOKEN header.
std::vector<FetchResult> fetch_recall(const std::vector<RecallSource>& sources, FetchOptions options);

}  // namespace mnemo
