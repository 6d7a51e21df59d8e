#include "engine/io/hub.h"

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <regex>

#include "core/atomic_file.h"

namespace mnemo {
namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool truthy(const std::string& v) {
  std::string s;
  for (char c : v) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](unsigned char c) {
           return std::isdigit(c) || (c >= 'a' && c <= 'f');
         });
}

void check_repo_id(const std::string& repo) {
  static const std::regex valid("[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*");
  if (!std::regex_match(repo, valid) || repo.find("..") != std::string::npos || repo.find("--") != std::string::npos)
    throw Error("hub: '" + repo + "' is not a model repository id (OWNER/NAME: letters, digits, '.', '_', '-')");
}

void check_revision(const std::string& revision) {
  static const std::regex valid("[A-Za-z0-9._][A-Za-z0-9._/-]*");
  if (!std::regex_match(revision, valid) || revision.find("..") != std::string::npos)
    throw Error("hub: '" + revision + "' is not a revision (a branch, tag or commit hash)");
}

// A path inside the repository, as the listing gives it: relative, without '.' or '..' parts.
void check_repo_file(const std::string& name, const std::string& where) {
  const fs::path p(name);
  bool ok = !name.empty() && p.is_relative() && name.find('\\') == std::string::npos;
  for (const auto& part : p)
    if (part == "." || part == ".." || part.empty()) ok = false;
  if (!ok) throw Error(where + ": the file name '" + text_excerpt(name) + "' is not a path inside the repository");
}

// A path segment for a URL: everything but unreserved characters percent-encoded ('/' too, as huggingface_hub
// quotes a revision such as refs/pr/1).
std::string quote_segment(const std::string& s) {
  std::string out = url_encode(s), encoded;
  for (char c : out) encoded += c == '/' ? std::string("%2F") : std::string(1, c);
  return encoded;
}

std::string human_bytes(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  else if (bytes >= (int64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  else if (bytes >= 1024) std::snprintf(buf, sizeof buf, "%.1f kB", bytes / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

bool matches(const std::vector<std::string>& patterns, const std::string& name) {
  if (patterns.empty()) return true;
  for (const std::string& p : patterns)
    if (::fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

struct RemoteFile {
  std::string name, blob;  // blob: the etag huggingface_hub names the blob by
  int64_t size = -1;
  std::string sha256;      // LFS files only
};

// The repository's commit and files at `revision`, from the Hub's model API.
std::pair<std::string, std::vector<RemoteFile>> list_revision(const std::string& repo, const std::string& revision,
                                                               const HubOptions& o, int& requests) {
  const std::string url =
      o.endpoint + "/api/models/" + repo + "/revision/" + quote_segment(revision) + "?blobs=true";
  HttpResponse r;
  try {
    r = http_get(url, o.http);
  } catch (const HttpError& e) {
    requests += o.http.max_retries + 1;
    std::string hint;
    if (e.status == 401)
      hint = o.token.empty() ? " (a private or gated repository, or none by that name: set HF_TOKEN to a token "
                               "that can read it)"
                             : " (the token in HF_TOKEN cannot read it, or there is no such repository)";
    else if (e.status == 403)
      hint = " (gated: accept the model's terms on the Hub with the account of HF_TOKEN)";
    else if (e.status == 404)
      hint = e.error_code == "RevisionNotFound" ? " (no revision '" + revision + "' in " + repo + ")"
                                                : " (no model repository " + repo + " at " + o.endpoint + ")";
    if (e.stopped) throw;
    throw Error("hub download " + repo + ": " + e.what() + hint);
  }
  requests += r.attempts;
  const json info = parse_json_text(r.body, url);
  if (!info.is_object() || !info.contains("sha") || !info["sha"].is_string() || !is_commit_hash(info["sha"]))
    throw Error(url + ": the answer has no commit hash \"sha\"");
  if (!info.contains("siblings") || !info["siblings"].is_array())
    throw Error(url + ": the answer has no file list \"siblings\"");
  std::vector<RemoteFile> files;
  for (const json& s : info["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string())
      throw Error(url + ": a \"siblings\" entry without \"rfilename\"");
    RemoteFile f;
    f.name = s["rfilename"].get<std::string>();
    check_repo_file(f.name, url);
    if (s.contains("lfs") && s["lfs"].is_object()) {
      const json& lfs = s["lfs"];
      if (!lfs.contains("sha256") || !lfs["sha256"].is_string() || !lfs.contains("size") ||
          !lfs["size"].is_number_integer())
        throw Error(url + ": '" + f.name + "': \"lfs\" without \"sha256\" and \"size\"");
      f.sha256 = lfs["sha256"].get<std::string>();
      f.blob = f.sha256;
      f.size = lfs["size"].get<int64_t>();
    } else {
      if (!s.contains("blobId") || !s["blobId"].is_string())
        throw Error(url + ": '" + f.name + "' has no \"blobId\" (the API answered without ?blobs=true)");
      f.blob = s["blobId"].get<std::string>();
      if (s.contains("size") && s["size"].is_number_integer()) f.size = s["size"].get<int64_t>();
    }
    static const std::regex hex("[0-9a-f]{40}|[0-9a-f]{64}");
    if (!std::regex_match(f.blob, hex)) throw Error(url + ": '" + f.name + "' has a malformed blob id '" + f.blob + "'");
    files.push_back(f);
  }
  return {info["sha"].get<std::string>(), files};
}

int64_t size_of(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? -1 : static_cast<int64_t>(n);
}

// snapshots/<commit>/<name> -> ../../blobs/<etag> (relative, as huggingface_hub makes it), replaced atomically.
void link_snapshot(const fs::path& repo_dir, const std::string& commit, const std::string& name,
                   const std::string& blob) {
  const fs::path link = repo_dir / "snapshots" / commit / name;
  fs::create_directories(link.parent_path());
  const fs::path target = (repo_dir / "blobs" / blob).lexically_relative(link.parent_path());
  std::error_code ec;
  if (fs::is_symlink(link, ec) && fs::read_symlink(link, ec) == target) return;
  const fs::path tmp = link.string() + ".mnemo-" + std::to_string(::getpid());
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (ec) throw Error("hub: cannot create the link " + tmp.string() + ": " + ec.message());
  fs::rename(tmp, link, ec);
  if (ec) throw Error("hub: cannot rename " + tmp.string() + " to " + link.string() + ": " + ec.message());
}

// One file into blobs/<etag>: continue blobs/<etag>.incomplete if there is one, check size and sha256, rename.
HubFile fetch_blob(const std::string& repo, const std::string& commit, const RemoteFile& f, const fs::path& repo_dir,
                   const HubOptions& o, int& requests) {
  const fs::path blob = repo_dir / "blobs" / f.blob;
  const int64_t have = size_of(blob);
  if (have >= 0 && (f.size < 0 || have == f.size)) return {f.name, "cached", have};
  fs::create_directories(blob.parent_path());
  const fs::path part = blob.string() + ".incomplete";
  if (f.size >= 0 && size_of(part) > f.size) fs::remove(part);  // longer than the file: not a prefix of it
  const int64_t resumed_from = std::max<int64_t>(size_of(part), 0);
  const std::string url = o.endpoint + "/" + repo + "/resolve/" + commit + "/" + url_encode(f.name);
  double last_line = wall_seconds();
  const double start = last_line;
  auto progress = [&](int64_t done, int64_t total) {
    if (!o.log || wall_seconds() - last_line < 5) return;
    last_line = wall_seconds();
    const double rate = (done - resumed_from) / std::max(1e-3, last_line - start);
    *o.log << "  " << f.name << ": " << human_bytes(done) << " of "
           << human_bytes(total > 0 ? total : f.size) << ", " << human_bytes(static_cast<int64_t>(rate)) << "/s"
           << std::endl;
  };
  if (o.log && resumed_from > 0)
    *o.log << "  " << f.name << ": continuing " << part.filename().string() << " from " << human_bytes(resumed_from)
           << std::endl;
  HttpDownload d;
  try {
    d = http_download(url, part.string(), o.http, progress);
  } catch (const HttpError& e) {
    requests += e.stopped ? 1 : o.http.max_retries + 1;
    if (e.stopped) throw;
    throw Error("hub download " + repo + ": " + f.name + ": " + e.what() +
                (size_of(part) > 0 ? " (" + human_bytes(size_of(part)) + " kept in " + part.string() +
                                         "; the next run continues it)"
                                   : std::string()));
  }
  requests += d.attempts;
  if (f.size >= 0 && d.bytes != f.size) {
    fs::remove(part);
    throw Error("hub download " + repo + ": " + f.name + ": received " + std::to_string(d.bytes) +
                " bytes, the Hub lists " + std::to_string(f.size) + " (removed " + part.string() + ")");
  }
  if (!f.sha256.empty()) {
    const std::string got = sha256_file(part.string());
    if (got != f.sha256) {
      fs::remove(part);
      throw Error("hub download " + repo + ": " + f.name + ": sha256 " + got + " differs from the Hub's " + f.sha256 +
                  " (a corrupted transfer; removed " + part.string() + ", run again)");
    }
  }
  fsync_path(part.string(), false);
  std::error_code ec;
  fs::rename(part, blob, ec);
  if (ec) throw Error("hub: cannot rename " + part.string() + " to " + blob.string() + ": " + ec.message());
  return {f.name, "fetched", d.bytes};
}

// Offline: the commit a revision names in the cache, and the snapshot's files.
HubDownloadResult from_cache(const std::string& repo, const std::string& revision, const fs::path& repo_dir,
                             const HubOptions& o) {
  HubDownloadResult r;
  r.repo = repo;
  r.revision = revision;
  std::error_code ec;
  if (is_commit_hash(revision) && fs::is_directory(repo_dir / "snapshots" / revision, ec)) {
    r.commit = revision;
  } else {
    const fs::path ref = repo_dir / "refs" / revision;
    if (!fs::is_regular_file(ref, ec))
      throw Error("hub: HF_HUB_OFFLINE=1 and revision '" + revision + "' of " + repo + " is not in the cache " +
                  o.cache_dir + " (no " + ref.string() + "); download it first with network");
    std::string commit = read_text_file(ref.string());
    while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
    if (!is_commit_hash(commit)) throw Error(ref.string() + ": not a commit hash: '" + text_excerpt(commit) + "'");
    r.commit = commit;
  }
  const fs::path snapshot = repo_dir / "snapshots" / r.commit;
  r.snapshot_dir = snapshot.string();
  if (!fs::is_directory(snapshot, ec))
    throw Error("hub: HF_HUB_OFFLINE=1 and the snapshot " + snapshot.string() + " is not in the cache");
  for (auto it = fs::recursive_directory_iterator(snapshot, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!fs::is_regular_file(it->path())) continue;  // a link to a blob that is missing is no file
    const std::string name = it->path().lexically_relative(snapshot).generic_string();
    if (matches(o.include, name)) r.files.push_back({name, "cached", size_of(it->path())});
  }
  return r;
}

}  // namespace

HubOptions hub_options_from_environment() {
  HubOptions o;
  if (const std::string e = env("HF_ENDPOINT"); !e.empty()) o.endpoint = e;
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  const std::string home = env("HOME");
  const std::string xdg = env("XDG_CACHE_HOME");
  const std::string hf_home = !env("HF_HOME").empty() ? env("HF_HOME")
                              : !xdg.empty()          ? xdg + "/huggingface"
                                                      : home + "/.cache/huggingface";
  o.cache_dir = !env("HF_HUB_CACHE").empty() ? env("HF_HUB_CACHE") : hf_home + "/hub";
  o.token = env("HF_TOKEN");
  if (o.token.empty()) {
    const std::string token_file = !env("HF_TOKEN_PATH").empty() ? env("HF_TOKEN_PATH") : hf_home + "/token";
    std::error_code ec;
    if (fs::is_regular_file(token_file, ec)) {
      o.token = read_text_file(token_file);
      while (!o.token.empty() && std::isspace(static_cast<unsigned char>(o.token.back()))) o.token.pop_back();
    }
  }
  o.offline = truthy(env("HF_HUB_OFFLINE"));
  return o;
}

HubDownloadResult hub_download(const std::string& repo, const std::string& revision_in, const HubOptions& options) {
  check_repo_id(repo);
  const std::string revision = revision_in.empty() ? "main" : revision_in;
  check_revision(revision);
  if (options.cache_dir.empty()) throw Error("hub: no cache folder (set HF_HUB_CACHE or HOME)");
  const std::string owner = repo.substr(0, repo.find('/')), name = repo.substr(repo.find('/') + 1);
  const fs::path repo_dir = fs::path(options.cache_dir) / ("models--" + owner + "--" + name);
  if (options.offline) return from_cache(repo, revision, repo_dir, options);

  HubOptions o = options;
  if (!o.token.empty()) o.http.headers.push_back("Authorization: Bearer " + o.token);
  HubDownloadResult r;
  r.repo = repo;
  r.revision = revision;
  auto [commit, files] = list_revision(repo, revision, o, r.requests);
  r.commit = commit;
  r.snapshot_dir = (repo_dir / "snapshots" / commit).string();
  std::vector<RemoteFile> wanted;
  for (const RemoteFile& f : files)
    if (matches(o.include, f.name)) wanted.push_back(f);
  if (wanted.empty()) {
    std::string patterns;
    for (const auto& p : o.include) patterns += (patterns.empty() ? "" : ", ") + p;
    throw Error("hub download " + repo + "@" + revision + ": no file matches --include " + patterns + " (the " +
                std::to_string(files.size()) + " files: " + [&] {
                  std::string list;
                  for (size_t i = 0; i < files.size() && i < 8; ++i) list += (i ? ", " : "") + files[i].name;
                  return list + (files.size() > 8 ? ", ..." : "");
                }() + ")");
  }
  fs::create_directories(repo_dir / "blobs");
  if (o.log)
    *o.log << "hub: " << repo << "@" << revision << " = commit " << commit.substr(0, 12) << ", " << wanted.size()
           << " file(s) into " << repo_dir.string() << std::endl;
  for (const RemoteFile& f : wanted) {
    HubFile got = fetch_blob(repo, commit, f, repo_dir, o, r.requests);
    link_snapshot(repo_dir, commit, f.name, f.blob);
    if (o.log) *o.log << "  " << f.name << ": " << human_bytes(got.bytes) << " " << got.status << std::endl;
    r.files.push_back(got);
  }
  if (revision != commit) {
    const fs::path ref = repo_dir / "refs" / revision;
    fs::create_directories(ref.parent_path());
    write_file_atomic(ref.string(), commit);
  }
  return r;
}

bool is_hub_model_spec(const std::string& spec) { return spec.rfind("hf:", 0) == 0; }

std::string hub_model_snapshot(const std::string& spec, std::ostream* log) {
  if (!is_hub_model_spec(spec)) throw Error("hub: '" + spec + "' is not hf:OWNER/NAME[@REVISION]");
  std::string id = spec.substr(3), revision = "main";
  if (const size_t at = id.find('@'); at != std::string::npos) {
    revision = id.substr(at + 1);
    id = id.substr(0, at);
  }
  HubOptions o = hub_options_from_environment();
  o.log = log;
  o.include = {"config.json",           "*.safetensors",          "model.safetensors.index.json",
               "tokenizer.json",        "tokenizer_config.json",  "special_tokens_map.json",
               "tokenizer.model",       "generation_config.json"};
  const HubDownloadResult r = hub_download(id, revision, o);
  if (!std::any_of(r.files.begin(), r.files.end(), [](const HubFile& f) { return f.name == "config.json"; }))
    throw Error("hub: " + spec + " has no config.json" +
                (o.offline ? " in the cache snapshot " + r.snapshot_dir : std::string(" (not a model repository?)")));
  return r.snapshot_dir;
}

}  // namespace mnemo
