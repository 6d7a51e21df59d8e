#include "engine/tools/report_catalog.h"

#include "engine/tools/quickstart.h"
#include "runtime/model.h"
#include "runtime/registry.h"
#include "synthetic/learnability.h"
#include "synthetic/mad.h"

namespace mnemo {

json report_catalog() {
  json mad = json::object();
  for (MadTask t : mad_tasks()) {
    json baseline = mad_params_to_json(t, mad_baseline(t));
    baseline["n_train"] = mad_baseline_n_train(t);
    baseline["n_test"] = kMadTestExamples;
    mad[mad_task_name(t)] = {{"baseline", baseline}, {"n_settings", mad_difficulty_settings(t).size()}};
  }
  json settings = json::object();
  for (int s = 1; s <= 5; ++s) settings[std::to_string(s)] = learnability_setting_name(s);
  json families = json::array();  // each family's report style, as its registration declares it
  for (const std::string& name : Registry::instance().model_names()) {
    const ModelFamily& m = Registry::instance().model(name);
    json variants = json::array();  // each with the value the family's runs have when they leave it unset
    if (!m.style.variants.empty()) {
      const json defaults = model_mixer_keys(name, json()).defaults;  // the pattern's mixers, then the overrides
      for (const ReportVariant& v : m.style.variants)
        variants.push_back({{"arg", v.arg}, {"label", v.label}, {"default", defaults.value(v.arg, json())}});
    }
    families.push_back({{"name", name}, {"group", m.style.group}, {"colour", m.style.colour}, {"variants", variants}});
  }
  return {{"mad", mad},
          {"learnability", {{"settings", settings}}},
          {"quickstart", quickstart_catalog()},
          {"families", families}};
}

}  // namespace mnemo
