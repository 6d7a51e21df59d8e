// `mnemo hub download OWNER/NAME [--revision R] [--include PATTERN ...]`: a model repository of the Hugging Face Hub
// into the Hugging Face cache (engine/io/hub.h: the cache layout huggingface_hub uses, resumable, sizes and LFS
// sha256s checked). Progress on stderr; on stdout a JSON summary whose "snapshot" is the folder to pass to
// `mnemo eval --checkpoint`.
#include <iostream>
#include <memory>

#include "cli/commands/commands.h"
#include "core/signals.h"
#include "engine/io/hub.h"

namespace mnemo::cli {

namespace {
struct HubArgs {
  std::string repo, revision = "main", cache_dir, endpoint;
  std::vector<std::string> include;
  int retries = 5;
  double retry_wait = 1.0;
  long stall_timeout = 60;
};
}  // namespace

void add_hub_command(CLI::App& app) {
  auto* hub = app.add_subcommand("hub", "Hugging Face Hub: download (a model repository into the Hugging Face cache)");
  hub->require_subcommand(1);
  auto a = std::make_shared<HubArgs>();
  auto* download = hub->add_subcommand(
      "download",
      "Download a model repository into the Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else "
      "~/.cache/huggingface/hub), in the layout huggingface_hub uses: files Python tools downloaded are reused and "
      "the other way round. Resumable; every file's size and each LFS file's sha256 are checked. Honours HF_TOKEN, "
      "HF_ENDPOINT and HF_HUB_OFFLINE=1. Prints the snapshot folder, which `mnemo eval --checkpoint` takes (or "
      "give --checkpoint hf:OWNER/NAME directly).");
  download->add_option("repo", a->repo, "The model repository, OWNER/NAME (e.g. fla-hub/gla-1.3B-100B)")->required();
  download->add_option("--revision", a->revision, "A branch, tag or commit hash")->capture_default_str();
  download->add_option("--include", a->include,
                       "Only files matching these shell patterns (repeatable; e.g. --include '*.json' "
                       "--include '*.safetensors'); default: every file");
  download->add_option("--cache-dir", a->cache_dir, "The hub cache folder (default: from the environment, above)");
  download->add_option("--endpoint", a->endpoint, "The Hub's URL (default: $HF_ENDPOINT or https://huggingface.co)");
  download->add_option("--retries", a->retries, "Retries of a request on 429, 5xx or a broken connection")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  download->add_option("--retry-wait", a->retry_wait, "Seconds before the first retry; doubles at each (at most 60 s)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  download
      ->add_option("--stall-timeout", a->stall_timeout,
                   "Seconds a transfer may go without receiving a byte before it is abandoned (and retried)")
      ->check(CLI::Range(1L, 3600L))
      ->capture_default_str();
  download->callback([a] {
    HubOptions o = hub_options_from_environment();
    if (!a->cache_dir.empty()) o.cache_dir = a->cache_dir;
    if (!a->endpoint.empty()) o.endpoint = a->endpoint;
    while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
    o.include = a->include;
    o.http.max_retries = a->retries;
    o.http.backoff_base_s = a->retry_wait;
    o.http.low_speed_time_s = a->stall_timeout;
    o.http.on_retry = [](const std::string& line) { std::cerr << line << std::endl; };
    o.log = &std::cerr;
    install_stop_handlers();  // SIGINT / SIGTERM: the .incomplete file stays; the same command continues it
    const HubDownloadResult r = hub_download(a->repo, a->revision, o);
    json files = json::array();
    int64_t bytes = 0;
    for (const HubFile& f : r.files) {
      files.push_back({{"file", f.name}, {"status", f.status}, {"bytes", f.bytes}});
      bytes += f.bytes;
    }
    std::cout << json{{"repo", r.repo},         {"revision", r.revision}, {"commit", r.commit},
                      {"snapshot", r.snapshot_dir}, {"offline", o.offline},   {"bytes", bytes},
                      {"requests", r.requests},  {"files", files}}
                     .dump()
              << "\n";
  });
}

}  // namespace mnemo::cli
