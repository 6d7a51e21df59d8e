// `mnemo hub download OWNER/NAME`: a model repository of the Hugging Face Hub into the Hugging Face cache, laid out
// as huggingface_hub lays it out, so files Python tools downloaded are reused here and the other way round:
//
//   <cache>/models--OWNER--NAME/blobs/<etag>                 a file's bytes (etag: the sha256 of an LFS file, the
//                                                            git blob id of any other)
//   <cache>/models--OWNER--NAME/blobs/<etag>.incomplete      a download under way; the next run continues it
//   <cache>/models--OWNER--NAME/snapshots/<commit>/<file>    a relative symlink to its blob
//   <cache>/models--OWNER--NAME/refs/<revision>              the commit the revision (a branch or tag) named
//
// The cache is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub. The Hub's endpoint is $HF_ENDPOINT (default https://huggingface.co); a token from
// $HF_TOKEN (else the file $HF_TOKEN_PATH, else $HF_HOME/token) goes in an Authorization header; with
// HF_HUB_OFFLINE=1 nothing is requested and the revision is read from the cache.
//
// Requests: GET {endpoint}/api/models/OWNER/NAME/revision/{revision}?blobs=true (the commit and each file's blob id,
// size and LFS sha256), then GET {endpoint}/OWNER/NAME/resolve/{commit}/{file} per file. Every file's size is
// checked, and an LFS file's sha256; a file is renamed to its blob name only once it is whole and checked.
#pragma once
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/http.h"

namespace mnemo {

struct HubOptions {
  std::string endpoint = "https://huggingface.co";
  std::string cache_dir;              // the hub cache (see above)
  std::string token;                  // "" = anonymous
  bool offline = false;               // HF_HUB_OFFLINE=1
  std::vector<std::string> include;   // shell patterns (fnmatch, '*' matches '/' too, as huggingface_hub's
                                      // allow_patterns); empty = every file of the repository
  HttpOptions http;
  std::ostream* log = nullptr;        // a line per file, and progress of large files
};

// The options the environment sets (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HOME, HF_ENDPOINT, HF_TOKEN,
// HF_TOKEN_PATH, HF_HUB_OFFLINE), as huggingface_hub reads them.
HubOptions hub_options_from_environment();

struct HubFile {
  std::string name;     // the path inside the repository
  std::string status;   // "fetched", "cached" (its blob was already whole)
  int64_t bytes = 0;
};

struct HubDownloadResult {
  std::string repo, revision, commit;
  std::string snapshot_dir;  // <cache>/models--OWNER--NAME/snapshots/<commit>
  std::vector<HubFile> files;
  int requests = 0;          // HTTP requests made, retries included (0 offline)
};

// Downloads the files of `repo` ("OWNER/NAME") at `revision` (a branch, tag or commit; "" = main) that match
// options.include. Throws Error naming the repository, the file and what went wrong (HTTP status with a hint for
// 401/403/404, size or sha256 mismatch, a file the revision does not have); a stop request (SIGINT / SIGTERM)
// leaves the .incomplete file for the next run.
HubDownloadResult hub_download(const std::string& repo, const std::string& revision, const HubOptions& options);

// A model given as "hf:OWNER/NAME[@REVISION]" (mnemo eval/generate/export --checkpoint).
bool is_hub_model_spec(const std::string& spec);
// Downloads (or, offline, finds in the cache) the files a model needs: config.json, the safetensors weights and
// their index, the tokenizer files and generation_config.json. Returns the snapshot folder.
std::string hub_model_snapshot(const std::string& spec, std::ostream* log);

}  // namespace mnemo
