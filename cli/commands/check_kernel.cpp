// `mnemo check-kernel FILE.json... [--chunk-sizes 16,64] [--dtype float64] [--json]`:
// runs every form of each fixture's op (chunked forms once per chunk size) on the fixture's
// inputs and compares every output with the README rule |a - e| <= atol + rtol |e|
// (shared/fixtures/kernels/README.md). Exits 1 if any file or form fails.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands/commands.h"
#include "core/parse_int.h"
#include "runtime/device.h"
#include "runtime/ops/fixture.h"

namespace mnemo::cli {

namespace {

struct CheckKernelOptions {
  std::vector<std::string> files;
  std::string chunk_sizes_text = "16,64";
  std::vector<int64_t> chunk_sizes;  // parsed from chunk_sizes_text
  std::string dtype = "float64";
  std::string device = "cpu";
  bool json_output = false;
  bool skip_unknown = false;
};

struct FileResult {
  std::string file, op, case_name;
  std::vector<FormCheck> checks;
  std::string error;  // load failure or unknown op
  bool skipped = false;
  bool pass() const {
    if (skipped) return true;
    if (!error.empty() || checks.empty()) return false;
    for (const auto& c : checks)
      if (!c.pass()) return false;
    return true;
  }
};

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", x);
  return buf;
}

// Directories stand for their *.json files.
std::vector<std::string> expand_paths(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      auto files = list_fixture_files(p);
      if (files.empty()) throw Error("check-kernel: directory '" + p + "' holds no *.json fixture files");
      out.insert(out.end(), files.begin(), files.end());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

FileResult check_file(const std::string& path, const CheckKernelOptions& o) {
  FileResult r;
  r.file = path;
  try {
    Fixture f = load_fixture(path);
    r.op = f.op;
    r.case_name = f.case_name;
    auto& registry = KernelOpRegistry::instance();
    if (!registry.has(f.op) && o.skip_unknown) {
      r.skipped = true;
      return r;
    }
    r.checks = check_fixture(f, registry.at(f.op), o.chunk_sizes, o.dtype, resolve_device(o.device));
  } catch (const Error& e) {
    r.error = e.what();
  }
  return r;
}

void print_text(const FileResult& r) {
  const std::string name = std::filesystem::path(r.file).filename().string();
  std::cout << name;
  if (!r.op.empty()) std::cout << "  (op " << r.op << (r.case_name.empty() ? "" : ", case " + r.case_name) << ")";
  std::cout << "\n";
  if (r.skipped) {
    std::cout << "  SKIP  op '" << r.op << "' is not registered\n";
    return;
  }
  if (!r.error.empty()) {
    std::cout << "  ERROR " << r.error << "\n";
    return;
  }
  int width = 14;  // the form column fits the longest label ("fused_chunk(C=64)")
  for (const auto& c : r.checks) width = std::max(width, static_cast<int>(c.label().size()));
  for (const auto& c : r.checks) {
    if (!c.error.empty()) {
      std::printf("  %-*s FAIL  %s\n", width, c.label().c_str(), c.error.c_str());
      continue;
    }
    bool first = true;
    for (const auto& out : c.outputs) {
      std::printf("  %-*s %-16s max_abs %-9s max_rel %-9s (rtol %s, atol %s)  %s%s\n", width,
                  first ? c.label().c_str() : "", out.name.c_str(), sci(out.max_abs_err).c_str(),
                  sci(out.max_rel_err).c_str(), sci(out.rtol).c_str(), sci(out.atol).c_str(),
                  out.pass ? "PASS" : "FAIL", out.problem.empty() ? "" : ("  " + out.problem).c_str());
      first = false;
    }
  }
  std::fflush(stdout);
}

json to_json(const FileResult& r, const std::string& dtype) {
  json j = {{"file", r.file}, {"op", r.op}, {"case", r.case_name}, {"dtype", dtype},
            {"pass", r.pass()}, {"skipped", r.skipped}, {"error", r.error}, {"forms", json::array()}};
  for (const auto& c : r.checks) {
    json f = {{"form", c.form}, {"chunk_size", c.chunk_size}, {"requested_chunk_size", c.requested_chunk_size},
              {"pass", c.pass()}, {"error", c.error},
              {"outputs", json::array()}};
    for (const auto& o : c.outputs)
      f["outputs"].push_back({{"name", o.name}, {"max_abs_err", o.max_abs_err}, {"max_rel_err", o.max_rel_err},
                              {"rtol", o.rtol}, {"atol", o.atol}, {"pass", o.pass}, {"problem", o.problem}});
    j["forms"].push_back(f);
  }
  return j;
}

// "16,64" -> {16, 64}; every entry a positive integer.
std::vector<int64_t> parse_chunk_sizes(const std::string& text) {
  std::vector<int64_t> sizes;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const auto value = parse_whole_int(item);
    if (!value || *value < 1)
      throw Error("check-kernel: --chunk-sizes '" + text + "': entry '" + item + "' is not a positive integer");
    sizes.push_back(*value);
    start = end + 1;
  }
  return sizes;
}

void run_check_kernel(CheckKernelOptions o) {
  if (o.dtype != "float64" && o.dtype != "float32")
    throw Error("check-kernel: --dtype must be float64 or float32, got '" + o.dtype + "'");
  o.chunk_sizes = parse_chunk_sizes(o.chunk_sizes_text);
  const std::string device = resolve_device(o.device).str();  // an unknown or absent device fails here, once

  std::vector<FileResult> results;
  json report = json::array();
  int64_t form_runs = 0, form_failures = 0, skipped = 0;
  std::vector<std::string> failed_files;
  for (const auto& path : expand_paths(o.files)) {
    FileResult r = check_file(path, o);
    if (o.json_output) {
      report.push_back(to_json(r, o.dtype));
    } else {
      print_text(r);
    }
    skipped += r.skipped;
    for (const auto& c : r.checks) {
      ++form_runs;
      form_failures += !c.pass();
    }
    if (!r.pass())
      failed_files.push_back(std::filesystem::path(path).filename().string() +
                             (r.error.empty() ? "" : " (" + r.error + ")"));
    results.push_back(std::move(r));
  }
  if (o.json_output) std::cout << report.dump(2) << "\n";

  const int64_t n_files = static_cast<int64_t>(results.size());
  int64_t checked_files = 0;
  for (const auto& r : results) checked_files += !r.checks.empty();
  std::string summary = std::to_string(form_runs - form_failures) + "/" + std::to_string(form_runs) +
                        " form runs passed on " + std::to_string(checked_files) + " checked files (" +
                        o.dtype + ", " + device + ")";
  if (skipped > 0) summary += ", " + std::to_string(skipped) + " files skipped (op not registered)";
  const int64_t errored = n_files - checked_files - skipped;
  if (errored > 0) summary += ", " + std::to_string(errored) + " files not checked (error)";
  if (!failed_files.empty()) {
    std::string list;
    for (const auto& f : failed_files) list += (list.empty() ? "" : ", ") + f;
    throw Error("check-kernel: " + std::to_string(failed_files.size()) + " of " + std::to_string(n_files) +
                " files failed: " + list + " [" + summary + "]");
  }
  (o.json_output ? std::cerr : std::cout) << "check-kernel: all passed: " << summary << "\n";
}

}  // namespace

void add_check_kernel_command(CLI::App& app) {
  auto opts = std::make_shared<CheckKernelOptions>();
  auto* sub = app.add_subcommand(
      "check-kernel",
      "Run every form of a kernel op on oracle fixture files (shared/fixtures/kernels) and compare");
  sub->add_option("files", opts->files, "Fixture JSON files or directories of them")->required();
  sub->add_option("--chunk-sizes", opts->chunk_sizes_text, "Chunk sizes for chunked forms, comma separated")
      ->capture_default_str();
  sub->add_option("--dtype", opts->dtype,
                  "float64 (fixture's float64 tolerances) or float32 (inputs cast to fp32, float32 tolerances)")
      ->capture_default_str();
  sub->add_option("--device", opts->device, "cpu | cuda | cuda:N | auto: where the kernels run")->capture_default_str();
  sub->add_flag("--json", opts->json_output, "Print the results as JSON");
  sub->add_flag("--skip-unknown", opts->skip_unknown, "Skip (do not fail) files whose op is not registered");
  sub->callback([opts] { run_check_kernel(*opts); });
}

}  // namespace mnemo::cli
