#include "tasks/task.h"

#include <mutex>

#include "core/config_values.h"
#include "tasks/token_batch.h"

namespace mnemo {

std::vector<json> TokenTask::generate_rows(Split split, int64_t n, uint64_t seed) const {
  std::vector<json> rows;
  for (auto& ex : examples(split, n, seed)) {
    json row = {{"input_ids", ex.input_ids}, {"labels", ex.labels}};
    if (ex.meta.is_object())
      for (auto it = ex.meta.begin(); it != ex.meta.end(); ++it) row[it.key()] = it.value();
    rows.push_back(std::move(row));
  }
  return rows;
}

json TokenTask::test_metrics(const std::function<torch::Tensor(const torch::Tensor&)>& logits_fn,
                             const std::vector<TokenExample>& test, const torch::Device& device) const {
  if (test_metric_names().empty()) return json::object();
  torch::NoGradGuard no_grad;
  constexpr size_t kBatch = 256;
  std::vector<std::vector<int64_t>> predictions;
  predictions.reserve(test.size());
  for (size_t b = 0; b < test.size(); b += kBatch) {
    std::vector<const TokenExample*> chunk;
    for (size_t i = b; i < std::min(test.size(), b + kBatch); ++i) chunk.push_back(&test[i]);
    const torch::Tensor argmax = logits_fn(collate(chunk, device).input_ids).argmax(-1).to(torch::kCPU).contiguous();
    const auto a = argmax.accessor<int64_t, 2>();
    for (size_t e = 0; e < chunk.size(); ++e) {
      std::vector<int64_t> row(chunk[e]->labels.size());
      for (size_t t = 0; t < row.size(); ++t) row[t] = a[static_cast<int64_t>(e)][static_cast<int64_t>(t)];
      predictions.push_back(std::move(row));
    }
  }
  return test_metrics_of(test, predictions);
}

TaskRegistry& TaskRegistry::instance() {
  static TaskRegistry r;
  static std::once_flag once;
  std::call_once(once, [] { register_builtin_tasks(r); });
  return r;
}

void TaskRegistry::add(TaskFamily f) {
  if (has(f.name)) throw Error("task registered twice: " + f.name);
  families_.push_back(std::move(f));
}

const TaskFamily& TaskRegistry::at(const std::string& name) const {
  for (const auto& f : families_)
    if (f.name == name) return f;
  std::string known;
  for (const auto& f : families_) known += (known.empty() ? "" : ", ") + f.name;
  throw Error("unknown task '" + name + "'; known tasks: " + known + " (see `mnemo tasks`)");
}

bool TaskRegistry::has(const std::string& name) const {
  for (const auto& f : families_)
    if (f.name == name) return true;
  return false;
}

std::vector<std::string> TaskRegistry::names() const {
  std::vector<std::string> v;
  for (const auto& f : families_) v.push_back(f.name);
  return v;
}

static bool same_kind(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return !(a.is_number_integer() && b.is_number_float());
  if (a.is_boolean() && b.is_number_integer()) return true;  // allow 0/1 for flags
  return a.type() == b.type() || a.is_null();
}

json TaskRegistry::resolve(const std::string& name, const json& user) const {
  const auto& f = at(name);
  json params = f.defaults;
  if (user.is_null()) return params;
  if (!user.is_object()) throw Error("task parameters for '" + name + "' must be a JSON object");
  for (auto it = user.begin(); it != user.end(); ++it) {
    if (!f.defaults.contains(it.key())) {
      std::string known;
      for (auto d = f.defaults.begin(); d != f.defaults.end(); ++d)
        known += (known.empty() ? "" : ", ") + d.key();
      throw Error("unknown parameter '" + it.key() + "' for task '" + name + "'; known: " + known);
    }
    const json& def = f.defaults[it.key()];
    json value = it.value();
    if (!same_kind(def, value))
      throw Error("task '" + name + "' parameter '" + it.key() + "' expects a " + expected_type_name(def) +
                  " (default " + json_excerpt(def) + "), got " + json_excerpt(value));
    if (def.is_boolean() && value.is_number_integer()) value = value.get<int64_t>() != 0;
    params[it.key()] = value;
  }
  return params;
}

std::shared_ptr<Task> TaskRegistry::make(const std::string& name, const json& user) const {
  json params = resolve(name, user);
  try {
    return at(name).make(params);
  } catch (const json::exception& e) {
    throw Error("invalid parameters for task '" + name + "': " + e.what());
  }
}

}  // namespace mnemo
