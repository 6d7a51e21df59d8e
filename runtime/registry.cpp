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
// A report variant names an argument of the family (a key of one of its mixers' defaults), and a label.
void require_variant_args(const std::string& name, const ReportStyle& style, const std::vector<const json*>& defaults) {
  for (const ReportVariant& v : style.variants) {
    bool known = false;
    for (const json* d : defaults) known = known || d->contains(v.arg);
    if (!known || v.label.empty())
      throw Error("model family " + name + ": report variant '" + v.arg + "' " +
                  (known ? "has no label" : "is not an argument of the family"));
  }
}
}  // namespace

void Registry::add_mixer(MixerFamily f) {
  if (has_mixer(f.name) || has_model(f.name)) throw Error("model family registered twice: " + f.name);
  require_quickstart_note(f.name, f.cpu_quickstart, f.quickstart_note);
  require_style(f.name, f.traits.style);
  require_variant_args(f.name, f.traits.style, {&f.defaults});
  if (!f.traits.mixing_flops) throw Error("mixer family " + f.name + " is registered without its FLOP formula");
  ModelFamily m;
  m.name = f.name;
  m.description = f.description;
  m.layer_pattern = {f.name};
  m.overrides = f.model_overrides.is_null() ? json::object() : f.model_overrides;
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
  std::vector<const json*> layer_defaults;
  for (const auto& layer : f.layer_pattern) layer_defaults.push_back(&mixer(layer).defaults);  // validates
  require_variant_args(f.name, f.style, layer_defaults);
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

const std::map<std::string, std::string>& mixer_arg_glossary() {
  static const std::map<std::string, std::string> glossary = {
      // -- layout --
      {"num_heads", "heads of the mixer; 0: the model's n_heads"},
      {"head_dim", "key width d_k per head; 0: d_model / heads"},
      {"expand_k", "key width per head as a multiple of d_model / heads"},
      {"expand_v", "value width per head d_v as a multiple of d_k"},
      {"expansion", "hidden width of the MLP memory as a multiple of the head width (docs/models.md#deep-memory)"},
      {"n_kv_heads", "key/value heads for grouped-query attention; 0: n_heads (no GQA)"},
      // -- forms and blocking --
      {"form", "\"chunk\": the chunked (parallel) form; \"recurrent\": the token-by-token reference, the same function "
               "(decode steps are always recurrent)"},
      {"chunk_size",
       "tokens per chunk of the chunked form. Linear families: speed only (the chunk form is exact). Deep-memory "
       "families (Titans, Miras, the ATLAS family, DOT, Lattice): part of the model, each chunk's inner steps read "
       "the chunk-start memory (docs/models.md#conventions)"},
      {"q_block", "queries per block of the attention (memory O(T x block)); speed and memory only"},
      {"query_block", "queries per block of DT / SWDT's exact attention; speed and memory only"},
      {"segment_size", "MAC segment length C: attention spans the persistent tokens, the memory read and the segment "
                       "(a multiple of chunk_size)"},
      {"window", "sliding-window attention width W: query t sees keys (t-W, t]"},
      {"rope_theta", "RoPE base"},
      // -- short convolutions --
      {"conv_size", "kernel width of the depthwise causal short convolution (docs/models.md#shared-building-blocks)"},
      {"use_short_conv", "depthwise causal short convolution + SiLU on q, k, v (docs/models.md#shared-building-blocks)"},
      {"short_conv", "depthwise causal short convolution + SiLU on q, k, v (docs/models.md#shared-building-blocks)"},
      {"use_conv", "Conv4 + SiLU on q, k, v (Titans)"},
      // -- gates and their initial biases --
      {"alpha_bias", "initial bias of the gate alpha = sigmoid(x w + alpha_bias): the memory's retention (Miras, ATLAS "
                     "family, DeepTransformers) or, in Titans, its forgetting (M_t = (1 - alpha_t) M_{t-1} + S_t)"},
      {"eta_bias", "initial bias of the inner learning-rate gate eta = sigmoid(x w + eta_bias), scaled by eta_max "
                   "where the family has one (Titans: the momentum gate)"},
      {"eta_max", "upper bound of the inner learning rate eta; ATLAS family: 0 means 1 / omega_window"},
      {"theta_bias", "initial bias of the gate theta = sigmoid(x w + theta_bias) (Titans: the inner learning rate, scaled "
                     "by theta_max; ATLAS: the Muon momentum)"},
      {"theta_max", "upper bound of Titans' inner learning rate theta"},
      {"gamma_bias", "initial bias of the gate gamma = sigmoid(x w + gamma_bias): a token's weight in the Omega window "
                     "(ATLAS family, DOT) or Lattice's write gate"},
      {"use_gamma", "the Omega rule's per-token weights gamma_i = sigmoid(x w + b) (docs/models.md#atlas-family); false: "
                    "gamma = 1"},
      {"gate_rank", "rank of the low-rank projections of the retention and learning-rate gates"},
      {"gate_granularity", "\"channel\": a gate per channel of the memory's hidden axis; \"head\": one per head"},
      {"a_init_min", "the decay rate A ~ U(a_init_min, a_init_max) at initialisation, A_log = log A "
                     "(docs/models.md#shared-building-blocks)"},
      {"a_init_max", "upper end of the decay rate's initial range (see a_init_min)"},
      {"allow_neg_eigval", "beta in (0, 2) instead of (0, 1): the transition may have negative eigenvalues"},
      {"beta_bias", "a bias in beta's projection; fla's layers have none (false: exportable to fla)"},
      {"output_gate", "gated RMSNorm output RMSNorm(y) * SiLU(x W_g); false: plain per-head RMSNorm"},
      {"use_output_gate", "sigmoid(x W_g) gate on the layer's output"},
      {"use_forget_gate", "a data-dependent scalar forget gate per head and token"},
      {"forget_gate", "Lattice's forget gate mu_t = sigmoid(x w + mu_bias) on the slots"},
      {"mu_bias", "initial bias of Lattice's forget gate mu"},
      {"la_normalize", "divide by the Katharopoulos normaliser q . sum_s phi(k_s) (docs/models.md#linear-attention)"},
      // -- deep test-time memories --
      {"memory", "the memory: \"mlp\" | \"linear\" | \"gated_mlp\" (docs/models.md#deep-memory)"},
      {"memory_depth", "Titans' memory: 1 a linear memory, 2 a residual MLP (docs/models.md#titans)"},
      {"n_persistent", "persistent (learned) tokens per layer prepended to the attention (docs/models.md#titans)"},
      {"use_momentum", "Titans' momentum (surprise carried over tokens); false: eta = 0"},
      {"use_decay", "Titans' forgetting gate; false: alpha = 0"},
      {"inner_grad_clip",
       "per-token inner gradient clamp tau: g <- g tau / max(tau, |g|) (docs/models.md#titans-inner-gradient-clamp); 0: off"},
      {"ln_eps", "epsilon of the memory's LayerNorm"},
      {"omega_window", "the Omega rule's window c: the memory fits the last c tokens (docs/models.md#atlas-family)"},
      {"loss", "the memory's inner loss: \"l2\" (Omega rule) or \"dot\" (Hebbian; docs/models.md#dla-swla-and-omeganet)"},
      {"phi", "feature map of keys and queries: \"taylor_elementwise\" | \"taylor_full2\" | \"identity\" "
              "(docs/models.md#atlas-family)"},
      {"phi_degree", "degree of the Taylor feature map phi"},
      {"ns_steps", "Newton-Schulz iterations of ATLAS's Muon step (docs/models.md#newton-schulz-orthogonalisation)"},
      {"atlas_readout", "\"token\": each token reads the memory after its own update (docs/models.md#atlas); "
                        "\"chunk_start\": reads the chunk-start memory"},
      {"ns_granularity", "\"token\": one Muon step per token; \"chunk\": one per chunk (docs/performance.md#atlas-cost-keys)"},
      {"ns_precision", "precision of the Newton-Schulz iterates: \"fp32\" | \"bf16\" (CUDA)"},
      {"atlas_recompute", "recompute each chunk in the backward (training memory of one chunk)"},
      {"row_max", "DT / SWDT: subtract each row's largest logit (the output RMSNorm is scale-invariant)"},
      {"slots", "Lattice's slots per head; 0: head_dim"},
      // -- TTT --
      {"mini_batch", "TTT's inner mini-batch b: part of the model (docs/models.md#ttt)"},
      {"eta_base", "TTT's inner learning rate scale: eta = (eta_base / d_h) sigmoid(x w)"},
      {"eta_convention", "TTT's step coefficients: \"ttt_lm\" (ttt-lm-pytorch) | \"fla\" (docs/models.md#ttt)"},
      {"output_residual", "TTT's output: \"query\" f(q) | \"inner\" o + LN(o) as fla (docs/models.md#ttt)"},
      // -- Mamba --
      {"mamba_expand", "inner width d_inner = mamba_expand x d_model"},
      {"mamba_head_dim", "width of a Mamba head (d_inner / mamba_head_dim heads)"},
      {"mamba_d_state", "state width N per head"},
      {"mamba_ngroups", "groups of heads sharing B and C"},
      {"mamba_dt_min", "the step dt is initialised log-uniform in [mamba_dt_min, mamba_dt_max]"},
      {"mamba_dt_max", "upper end of dt's initial range (see mamba_dt_min)"},
      {"mamba_dt_floor", "lower clamp of dt at initialisation"},
      {"mamba_norm_eps", "epsilon of the gated RMSNorm before the output projection"},
  };
  return glossary;
}

std::string mixer_arg_meaning(const MixerFamily& mixer, const std::string& arg) {
  if (auto it = mixer.traits.arg_meanings.find(arg); it != mixer.traits.arg_meanings.end()) return it->second;
  const auto& glossary = mixer_arg_glossary();
  if (auto it = glossary.find(arg); it != glossary.end()) return it->second;
  return "";
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
