#include "runtime/ops/fixture.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

namespace mnemo {

namespace fs = std::filesystem;

std::string fixtures_dir() {
  if (const char* env = std::getenv("MNEMO_FIXTURES_DIR"); env && *env) return env;
  return (fs::path(data_dir()) / ".." / "fixtures" / "kernels").lexically_normal().string();
}

std::vector<std::string> list_fixture_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("fixtures directory '" + dir + "' does not exist (set MNEMO_FIXTURES_DIR)");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json")
      files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

torch::Tensor tensor_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": expected an object {shape, dtype, data}");
  if (!j.contains("shape") || !j.at("shape").is_array())
    throw Error(where + ".shape: missing or not an array");
  std::vector<int64_t> shape;
  int64_t numel = 1;
  for (const auto& d : j.at("shape")) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      throw Error(where + ".shape: entries must be non-negative integers, got " + json_excerpt(d));
    shape.push_back(d.get<int64_t>());
    if (__builtin_mul_overflow(numel, shape.back(), &numel))  // found by fuzzing (UBSan: signed overflow)
      throw Error(where + ".shape: " + json_excerpt(j.at("shape")) + " has more elements than a tensor can hold");
  }
  if (j.contains("dtype")) {
    const auto& dt = j.at("dtype");
    if (!dt.is_string() || (dt != "float64" && dt != "float32"))
      throw Error(where + ".dtype: expected \"float64\" or \"float32\", got " + json_excerpt(dt));
  }
  if (!j.contains("data") || !j.at("data").is_array())
    throw Error(where + ".data: missing or not a flat array");
  const auto& data = j.at("data");
  if (static_cast<int64_t>(data.size()) != numel)
    throw Error(where + ".data: has " + std::to_string(data.size()) + " values but shape " +
                json_excerpt(j.at("shape")) + " needs " + std::to_string(numel));
  std::vector<double> values;
  values.reserve(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    if (!data[i].is_number())
      throw Error(where + ".data[" + std::to_string(i) + "]: not a number (" + json_excerpt(data[i]) + ")");
    values.push_back(data[i].get<double>());
  }
  return torch::from_blob(values.data(), shape, torch::kFloat64).clone();
}

namespace {

std::pair<double, double> read_tolerance(const json& hint, const std::string& where) {
  if (!hint.is_object()) throw Error(where + ": missing or not an object");
  for (const char* key : {"rtol", "atol"}) {
    if (!hint.contains(key) || !hint.at(key).is_number() || hint.at(key).get<double>() < 0)
      throw Error(where + "." + key + ": missing or not a non-negative number");
  }
  return {hint.at("rtol").get<double>(), hint.at("atol").get<double>()};
}

TensorMap read_tensor_map(const json& root, const std::string& field, const std::string& file) {
  if (!root.contains(field) || !root.at(field).is_object())
    throw Error("fixture " + file + ": field '" + field + "' missing or not an object");
  TensorMap out;
  for (const auto& [name, value] : root.at(field).items())
    out[name] = tensor_from_json(value, "fixture " + file + ": field " + field + "." + name);
  return out;
}

}  // namespace

Fixture load_fixture(const std::string& path) {
  json root = read_json_file(path);
  if (!root.is_object()) throw Error("fixture " + path + ": top level is not a JSON object");
  Fixture f;
  f.path = path;
  if (!root.contains("op") || !root.at("op").is_string() || root.at("op").get<std::string>().empty())
    throw Error("fixture " + path + ": field 'op' missing or not a non-empty string");
  f.op = root.at("op").get<std::string>();
  if (root.contains("case") && root.at("case").is_string()) f.case_name = root.at("case");
  if (root.contains("layout") && root.at("layout").is_string()) f.layout = root.at("layout");
  f.params = root.value("params", json::object());
  if (!f.params.is_object()) throw Error("fixture " + path + ": field 'params' is not an object");
  f.inputs = read_tensor_map(root, "inputs", path);
  f.outputs = read_tensor_map(root, "outputs", path);
  if (f.outputs.empty()) throw Error("fixture " + path + ": field 'outputs' is empty");
  if (!root.contains("tolerance_hint") || !root.at("tolerance_hint").is_object())
    throw Error("fixture " + path + ": field 'tolerance_hint' missing or not an object");
  f.tolerance_hint = root.at("tolerance_hint");
  for (const auto& [name, t] : f.outputs) {
    (void)t;
    fixture_tolerance(f, name, "float64");  // every output needs its fp64 tolerance
  }
  return f;
}

std::pair<double, double> fixture_tolerance(const Fixture& f, const std::string& output,
                                            const std::string& precision) {
  const std::string where = "fixture " + f.path + ": field tolerance_hint." + output;
  if (!f.tolerance_hint.contains(output)) throw Error(where + ": missing");
  const auto& per_output = f.tolerance_hint.at(output);
  if (!per_output.is_object() || !per_output.contains(precision))
    throw Error(where + "." + precision + ": missing");
  return read_tolerance(per_output.at(precision), where + "." + precision);
}

OutputComparison compare_output(const std::string& name, const torch::Tensor& actual,
                                const torch::Tensor& expected, double rtol, double atol) {
  OutputComparison c;
  c.name = name;
  c.rtol = rtol;
  c.atol = atol;
  if (!actual.defined()) {
    c.problem = "output missing";
    return c;
  }
  if (actual.sizes() != expected.sizes()) {
    c.problem = "shape " + c10::str(actual.sizes()) + " but the fixture has " + c10::str(expected.sizes());
    return c;
  }
  auto a = actual.detach().to(torch::kCPU, torch::kFloat64);
  auto e = expected.to(torch::kFloat64);
  auto err = (a - e).abs();
  if (err.numel() > 0) {
    c.max_abs_err = err.max().item<double>();
    c.max_rel_err = c.max_abs_err / std::max(e.abs().max().item<double>(), 1e-300);
  }
  if (!torch::isfinite(a).all().item<bool>()) {
    c.problem = "non-finite values";
    c.max_abs_err = c.max_rel_err = std::numeric_limits<double>::infinity();
    return c;
  }
  c.pass = (err <= atol + rtol * e.abs()).all().item<bool>();
  return c;
}

bool FormCheck::pass() const {
  if (!error.empty() || outputs.empty()) return false;
  for (const auto& o : outputs)
    if (!o.pass) return false;
  return true;
}

std::string FormCheck::label() const {
  if (chunk_size <= 0) return form;
  const std::string asked =
      requested_chunk_size > 0 && requested_chunk_size != chunk_size ? ", for C=" + std::to_string(requested_chunk_size) : "";
  return form + "(C=" + std::to_string(chunk_size) + asked + ")";
}

std::vector<FormCheck> check_fixture(const Fixture& f, const KernelOp& op,
                                     const std::vector<int64_t>& chunk_sizes,
                                     const std::string& precision, const torch::Device& device) {
  if (precision != "float64" && precision != "float32")
    throw Error("check_fixture: precision must be float64 or float32, got '" + precision + "'");
  const auto dtype = precision == "float64" ? torch::kFloat64 : torch::kFloat32;
  TensorMap inputs;
  for (const auto& [name, t] : f.inputs) inputs[name] = t.to(device, dtype);

  std::vector<FormCheck> checks;
  for (const auto& form : op.forms) {
    std::vector<int64_t> sizes = {0};
    if (form.find("chunk") != std::string::npos) {
      if (chunk_sizes.empty()) throw Error("check_fixture: no chunk sizes given for form '" + form + "'");
      sizes = chunk_sizes;
    }
    for (int64_t c : sizes) {
      FormCheck check;
      check.form = form;
      check.chunk_size = c > 0 && op.chunk_used ? op.chunk_used(c) : c;
      check.requested_chunk_size = c;
      std::string unnamed;  // an output of the op that the fixture does not have
      try {
        TensorMap out = op.run(inputs, f.params, form, c);
        for (auto& [name, t] : out)
          if (t.defined()) t = t.to(torch::kCPU);  // compared on the host
        for (const auto& [name, t] : out)
          if (unnamed.empty() && f.outputs.find(name) == f.outputs.end()) unnamed = name;
        for (const auto& [name, expected] : f.outputs) {
          auto [rtol, atol] = fixture_tolerance(f, name, precision);
          auto it = out.find(name);
          check.outputs.push_back(
              compare_output(name, it == out.end() ? torch::Tensor() : it->second, expected, rtol, atol));
        }
      } catch (const c10::Error& e) {
        check.error = e.what_without_backtrace();
      } catch (const std::exception& e) {
        check.error = e.what();
      }
      // A fixture whose expected output was deleted would pass on the outputs left: refuse it.
      if (!unnamed.empty()) {
        std::string named;
        for (const auto& [name, t] : f.outputs) named += (named.empty() ? "" : ", ") + name;
        throw Error("fixture " + f.path + ": field outputs." + unnamed + " is missing: op '" + f.op + "' (form " +
                    check.label() + ") produces output '" + unnamed + "', and a fixture must name every output it " +
                    "checks (the fixture has: " + named + ")");
      }
      checks.push_back(std::move(check));
    }
  }
  return checks;
}

}  // namespace mnemo
