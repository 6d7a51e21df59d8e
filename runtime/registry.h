// Registry of model families: name -> args (JSON defaults) -> factory.
// A family = one mixer type (its own file) + one line in runtime/families.cpp.
// A model = a per-layer pattern of mixer names (a single family, or a hybrid such as samba).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/common.h"
#include "runtime/mixer.h"
#include "runtime/fla_names.h"
#include "runtime/mixing_flops.h"

namespace mnemo {

// Where the report draws a family: its group (the papers' comparison it belongs to: "attention", "linear
// recurrent", "deep test-time memory", "Atlas family", "MoM / Lattice", "hybrids", or a new one) and its colour,
// a name of the report's palette ("black", "grey", "blue", "orange", "green", "red", "purple", "brown", "pink",
// "olive", "cyan", "gold"), distinct within its group. The group sets the marker.
//
// Its variants: the arguments that make a run of the family a different model in the report (a row, a line, a bar
// of its own, in the family's colour) where the run sets them away from the family's default; the report names
// such a run "<model> (<label> <value>)", e.g. "mamba3 (MIMO rank 4)". Arguments that do not change the function
// computed (chunk_size, kernel choices) are not variants.
struct ReportVariant {
  std::string arg;    // an argument of the family's mixer, e.g. "mamba_mimo_rank"
  std::string label;  // how the report names it, e.g. "MIMO rank"
};
struct ReportStyle {
  std::string group;
  std::string colour;
  std::vector<ReportVariant> variants;
};

// What the harness knows about a family beyond building it; every registration states it, so a family is its
// folder plus one registration (bench, the FLOP count, the report and the quickstart read it from here).
struct FamilyTraits {
  MixingFlops mixing_flops;  // forward FLOPs per token of the token mixing (runtime/mixing_flops.h)
  ReportStyle style;
  // The MQAR quickstart's learning rate: the best of the probe sweep configs/mqar_quickstart_lr.json (its
  // description has the accuracies) where the family was probed; 2e-3 otherwise.
  double quickstart_mqar_lr = 2e-3;
  // The fla model_types this family imports (`mnemo import-fla`; runtime/fla_names.h); empty: none.
  std::vector<FlaMixerNames> fla;
  // The meaning of each argument of this family that the shared glossary (mixer_arg_glossary) does not give, or
  // gives in words that do not fit this family; `mnemo keys` and docs/configuration.md print them.
  std::map<std::string, std::string> arg_meanings;
};

struct MixerFamily {
  std::string name;
  std::string description;  // one line, with its docs/models.md section
  json defaults;            // the args struct's defaults (JSON round-trip)
  std::function<std::shared_ptr<Mixer>(const MixerContext&)> make;
  FamilyTraits traits;
  bool cpu_quickstart = true;  // included in `mnemo quickstart` on CPU
  // Why the CPU quickstart leaves this family out (cpu_quickstart false): the report's reason, written here with
  // the family it is about (Registry refuses a family left out without one).
  std::string quickstart_note;
  // Skeleton keys the model of the same name sets (ModelFamily::overrides), e.g. rwkv7's LayerNorm block.
  json model_overrides = json::object();
};

// A model family: which mixer each layer uses (pattern repeated over n_layers), and overrides
// of model-wide defaults. Every mixer family is also a model with the pattern [name].
struct ModelFamily {
  std::string name;
  std::string description;
  std::vector<std::string> layer_pattern;
  json overrides;  // e.g. {"window": 64}
  // Its place in the report and its quickstart learning rate (a plain mixer's: the mixer's; the FLOPs are each
  // layer's mixer's).
  ReportStyle style;
  double quickstart_mqar_lr = 2e-3;
  bool cpu_quickstart = true;
  std::string quickstart_note;  // as MixerFamily's
};

class Registry {
 public:
  static Registry& instance();  // built-ins registered on first use

  // Both refuse (Error naming the family) a name registered twice, a family without its FLOP formula or report
  // style, and one left out of the CPU quickstart without its note.
  void add_mixer(MixerFamily family);
  void add_model(ModelFamily family);  // hybrids; plain mixers are added automatically

  const MixerFamily& mixer(const std::string& name) const;  // throws Error listing known names
  const ModelFamily& model(const std::string& name) const;  // throws Error listing known names
  bool has_mixer(const std::string& name) const;
  bool has_model(const std::string& name) const;
  std::vector<std::string> mixer_names() const;
  std::vector<std::string> model_names() const;

 private:
  std::vector<MixerFamily> mixers_;
  std::vector<ModelFamily> models_;
};

// The meanings of argument names that several families share (chunk_size, form, conv_size, ...): one name, one
// meaning, as a flat config key applies to every layer whose mixer declares it.
const std::map<std::string, std::string>& mixer_arg_glossary();
// What argument `arg` of mixer `mixer` means: the family's own arg_meanings, else the glossary; "" when neither has it.
std::string mixer_arg_meaning(const MixerFamily& mixer, const std::string& arg);

// A mixer factory's argument check: every key of `args` is one the family declares (else Error naming it).
void check_mixer_args(const std::string& mixer, const json& defaults, const json& args);

// Helper for the common case: an args struct with NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT
// and a mixer constructed as M(const MixerContext&, const Args&).
template <class Args, class M>
MixerFamily make_mixer_family(const std::string& name, const std::string& description, FamilyTraits traits,
                              bool cpu_quickstart = true, const std::string& quickstart_note = "") {
  MixerFamily f;
  f.name = name;
  f.description = description;
  f.traits = std::move(traits);
  f.defaults = json(Args{});
  f.cpu_quickstart = cpu_quickstart;
  f.quickstart_note = quickstart_note;
  f.make = [name, defaults = f.defaults](const MixerContext& ctx) -> std::shared_ptr<Mixer> {
    check_mixer_args(name, defaults, ctx.args);
    Args a;
    try {
      a = ctx.args.get<Args>();
    } catch (const json::exception& e) {
      throw Error("invalid arguments for mixer '" + name + "': " + e.what());
    }
    return std::make_shared<M>(ctx, a);
  };
  return f;
}

// Defined in runtime/families.cpp: calls every family's register function.
void register_builtin_families(Registry& r);

}  // namespace mnemo
