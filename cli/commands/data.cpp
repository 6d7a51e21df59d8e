// `mnemo data fetch recall [--tasks fda,swde,...] [--endpoint URL] [--out DIR] [--page-size N] [--force]`: downloads
// the recall-intensive QA sets from the Hugging Face datasets-server rows API into <data dir>/eval/recall/<task>.jsonl
// (engine/io/data_fetch.h: resumable, checksums in CHECKSUMS.json). Progress on stderr, a JSON summary on stdout.
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands/commands.h"
#include "core/signals.h"
#include "engine/io/data_fetch.h"

namespace mnemo::cli {

namespace {

struct RecallArgs {
  std::string tasks = "all";
  std::string endpoint = "https://datasets-server.huggingface.co";
  std::string out;
  int page_size = 100;
  bool force = false;
  std::vector<std::string> datasets;  // TASK=OWNER/NAME
  std::string config, split;
  int retries = 5;
  double retry_wait = 1.0;
  long stall_timeout = 60;
};

std::vector<RecallSource> selected_sources(const RecallArgs& a) {
  std::vector<RecallSource> sources;
  if (a.tasks == "all") {
    sources = recall_sources();
  } else {
    std::stringstream ss(a.tasks);
    std::string name;
    while (std::getline(ss, name, ',')) {
      if (name.empty()) continue;
      bool dup = false;
      for (const RecallSource& s : sources) dup = dup || s.task == name;
      if (!dup) sources.push_back(recall_source(name));
    }
    if (sources.empty()) throw Error("--tasks: no task named (give e.g. --tasks fda,swde, or all)");
  }
  for (const std::string& d : a.datasets) {
    const size_t eq = d.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == d.size())
      throw Error("--dataset expects TASK=OWNER/NAME (e.g. nq=hazyresearch/based_nq_1024), got '" + d + "'");
    const std::string task = d.substr(0, eq);
    recall_source(task);  // an unknown task name is an error, listing the known ones
    for (RecallSource& s : sources)
      if (s.task == task) s.dataset = d.substr(eq + 1);
  }
  for (RecallSource& s : sources) {
    if (!a.config.empty()) s.config = a.config;
    if (!a.split.empty()) s.split = a.split;
  }
  return sources;
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Data tools: fetch (download evaluation data)");
  data->require_subcommand(1);
  auto* fetch = data->add_subcommand("fetch", "Download evaluation data sets into the data directory");
  fetch->require_subcommand(1);

  auto a = std::make_shared<RecallArgs>();
  std::string known;
  for (const RecallSource& s : recall_sources()) known += (known.empty() ? "" : ", ") + s.task;
  auto* recall = fetch->add_subcommand(
      "recall",
      "Download the recall-intensive QA sets (" + known +
          ") from the Hugging Face datasets-server rows API into <data dir>/eval/recall/<task>.jsonl, one row per "
          "line. Resumable (an interrupted or failed download continues where it stopped); sha256s recorded in "
          "CHECKSUMS.json; a file matching its record is skipped. Needs network; set HF_TOKEN for gated datasets.");
  recall->add_option("--tasks", a->tasks, "Comma-separated tasks, or all (" + known + ")")->capture_default_str();
  recall->add_option("--endpoint", a->endpoint, "datasets-server base URL")->capture_default_str();
  recall->add_option("--out", a->out, "Destination folder (default: <data dir>/eval/recall)");
  recall->add_option("--page-size", a->page_size, "Rows per request, 1..100")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  recall->add_flag("--force", a->force, "Fetch again even when a file matches its recorded checksum");
  recall->add_option("--dataset", a->datasets,
                     "TASK=OWNER/NAME: another Hugging Face dataset for a task (repeatable), e.g. "
                     "nq=hazyresearch/based_nq_1024");
  recall->add_option("--config", a->config, "Dataset config for every task (default: default)");
  recall->add_option("--split", a->split, "Split for every task (default: validation)");
  recall->add_option("--retries", a->retries, "Retries of a request on 429, 5xx or a connection error")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  recall
      ->add_option("--retry-wait", a->retry_wait,
                   "Seconds before the first retry; doubles at each retry (at most 60 s)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  recall
      ->add_option("--stall-timeout", a->stall_timeout,
                   "Seconds a request may go without receiving a byte before it is abandoned (and retried)")
      ->check(CLI::Range(1L, 3600L))
      ->capture_default_str();
  recall->callback([a] {
    const std::vector<RecallSource> sources = selected_sources(*a);
    FetchOptions opt;
    opt.endpoint = a->endpoint;
    opt.out_dir = a->out.empty() ? (std::filesystem::path(data_dir()) / "eval" / "recall").string() : a->out;
    opt.page_size = a->page_size;
    opt.force = a->force;
    opt.http.max_retries = a->retries;
    opt.http.backoff_base_s = a->retry_wait;
    opt.http.low_speed_time_s = a->stall_timeout;
    opt.log = &std::cerr;
    install_stop_handlers();  // SIGINT / SIGTERM: stop after the current page; the .part stays resumable
    const std::vector<FetchResult> results = fetch_recall(sources, opt);
    json tasks = json::array();
    for (const FetchResult& r : results)
      tasks.push_back({{"task", r.task},
                       {"status", r.status},
                       {"file", r.file},
                       {"rows", r.rows},
                       {"rows_total", r.rows_total},
                       {"sha256", r.sha256},
                       {"requests", r.requests}});
    std::cout << json{{"out", opt.out_dir}, {"tasks", tasks}}.dump() << "\n";
    if (!results.empty() && results.back().status == "stopped") {
      std::cout.flush();
      std::cerr << "mnemo: interrupted by " << stop_signal_name() << ": " << results.back().task << " stopped at "
                << results.back().rows << " rows; the same command resumes there\n";
      std::cerr.flush();
      std::exit(128 + stop_signal());
    }
  });
}

}  // namespace mnemo::cli
