#include "runtime/registry.h"

#include <mutex>

namespace mnemo {

LayerState LayerState::clone() const {
  LayerState s;
  s.pos = pos;
  for (const auto& [k, v] : tensors) s.tensors[k] = v.clone();
  return s;
}

int64_t LayerState::bytes() const {
  int64_t b = 0;
  for (const auto& [k, v] : tensors) b += v.numel() * static_cast<int64_t>(v.element_size());
  return b;
}

Registry& Registry::instance() {
  static Registry r;
  static std::once_flag once;
  std::call_once(once, [] { register_builtin_families(r); });
  return r;
}

namespace {
// A family the CPU quickstart leaves out says why (its report lists the reason beside the family).
void require_quickstart_note(const std::string& name, bool cpu_quickstart, const std::string& note) {
  if (!cpu_quickstart && note.empty())
    throw Error("model family " + name + " is left out of the CPU quickstart (cpu_quickstart false) without a "
                "quickstart_note saying why");
}
void require_style(const std::string& name, const ReportStyle& style) {
  if (style.group.empty() || style.colour.empty())
    throw Error("model family " + name + " is registered without its report style (group and colour)");
}
}  // namespace

void Registry::add_mixer(MixerFamily f) {
  if (has_mixer(f.name) || has_model(f.name)) throw Error("model family registered twice: " + f.name);
  require_quickstart_note(f.name, f.cpu_quickstart, f.quickstart_note);
  require_style(f.name, f.traits.style);
  if (!f.traits.mixing_flops) throw Error("mixer family " + f.name + " is registered without its FLOP formula");
  ModelFamily m;
  m.name = f.name;
  m.description = f.description;
  m.layer_pattern = {f.name};
  m.overrides = json::object();
  m.style = f.traits.style;
  m.quickstart_mqar_lr = f.traits.quickstart_mqar_lr;
  m.cpu_quickstart = f.cpu_quickstart;
  m.quickstart_note = f.quickstart_note;
  mixers_.push_back(std::move(f));
  models_.push_back(std::move(m));
}

void Registry::add_model(ModelFamily f) {
  if (has_model(f.name)) throw Error("model family registered twice: " + f.name);
  require_quickstart_note(f.name, f.cpu_quickstart, f.quickstart_note);
  require_style(f.name, f.style);
  for (const auto& layer : f.layer_pattern) mixer(layer);  // validates
  if (f.overrides.is_null()) f.overrides = json::object();
  models_.push_back(std::move(f));
}

static std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

const MixerFamily& Registry::mixer(const std::string& name) const {
  for (const auto& f : mixers_)
    if (f.name == name) return f;
  throw Error("unknown mixer '" + name + "'; known mixers: " + join_names(mixer_names()));
}

const ModelFamily& Registry::model(const std::string& name) const {
  for (const auto& f : models_)
    if (f.name == name) return f;
  throw Error("unknown model '" + name + "'; known models: " + join_names(model_names()) +
              " (see `mnemo models`)");
}

bool Registry::has_mixer(const std::string& name) const {
  for (const auto& f : mixers_)
    if (f.name == name) return true;
  return false;
}

bool Registry::has_model(const std::string& name) const {
  for (const auto& f : models_)
    if (f.name == name) return true;
  return false;
}

std::vector<std::string> Registry::mixer_names() const {
  std::vector<std::string> v;
  for (const auto& f : mixers_) v.push_back(f.name);
  return v;
}

std::vector<std::string> Registry::model_names() const {
  std::vector<std::string> v;
  for (const auto& f : models_) v.push_back(f.name);
  return v;
}

void check_mixer_args(const std::string& mixer, const json& defaults, const json& args) {
  if (!args.is_object()) throw Error("arguments for mixer '" + mixer + "' must be a JSON object, got " + json_excerpt(args));
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (defaults.contains(it.key())) continue;
    std::string known;
    for (auto k = defaults.begin(); k != defaults.end(); ++k) known += (known.empty() ? "" : ", ") + k.key();
    throw Error("mixer '" + mixer + "' has no argument '" + it.key() + "'; its arguments: " +
                (known.empty() ? "(none)" : known));
  }
}

}  // namespace mnemo
