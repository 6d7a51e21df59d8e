// A family's side of the flash-linear-attention (fla) import (`mnemo import-fla`, engine/io/fla_import.h): how an
// fla model_type's config.json becomes the family's mnemo keys, and where each of its mixer's parameters sits in
// fla's checkpoint. A family that fla also has states this on its registration (FamilyTraits::fla); the importer
// does the parts every fla model shares (embedding, blocks' norms and GatedMLP, final norm, head).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

// Where a mnemo parameter comes from: the first fla key of `keys` present in the file, or a constant fill for a
// parameter fla does not have (it then computes the same function: a zero bias, a unit norm weight).
struct FlaSource {
  std::vector<std::string> keys;
  enum class Fill { none, zeros, ones } fill = Fill::none;
  // fla's shape of the tensor when it differs from mnemo's by leading unit dims (RWKV-7's [1, 1, d] token-shift
  // mixes): the import drops them, the export writes them. Empty: mnemo's shape.
  std::vector<int64_t> fla_shape;
};
using FlaKeyMap = std::map<std::string, FlaSource>;

// An fla config.json over fla's defaults for its model_type, read with messages that name the file and field;
// refuse() ends the import with "WHERE: cannot import fla TYPE exactly: WHAT".
struct FlaConfigView {
  const json& config;
  std::string where;  // the file, for messages
  std::string type;   // fla's model_type

  int64_t integer(const std::string& field) const;
  double number(const std::string& field) const;
  bool flag(const std::string& field) const;
  bool is_null(const std::string& field) const { return config.at(field).is_null(); }
  [[noreturn]] void refuse(const std::string& what) const;
  // d * config[field] as an exact positive multiple of `heads` (fla truncates with int(); mnemo needs it exact).
  int64_t exact_dim(const std::string& field, int64_t d, int64_t heads) const;
  // Checks shared by several families.
  void require_norm_eps_1e6() const;  // the eps of mnemo's norms inside a mixer is fixed at 1e-6
  void require_heads_divide(int64_t d, int64_t heads) const;
  void require_same_kv_heads(const std::string& field, int64_t heads) const;  // no shared key/value heads
};

// Names under which one layer's mixer parameters sit: mnemo's "block<i>.mixer." and fla's "<prefix>layers.<i>.attn.".
struct FlaLayerPrefixes {
  std::string mnemo, fla;
};

// The keys of a delta-rule-style mixer whose heads are fla's num_heads × head_dim, independent of hidden_size: the
// skeleton's n_heads (the largest divisor of d_model not above num_heads), num_heads, head_dim, expand_v = d_v / d_k,
// and the short conv's conv_size and use_short_conv. Refuses d_k <= 0 or a d_v that is not a positive integer.
void fla_head_layout_keys(const FlaConfigView& c, json& keys, int64_t head_dim, double expand_v);

// The keys of a Mamba-style layer (fla's Mamba2 and Mamba3 configs): heads of head_dim over expand × hidden_size,
// state_size, n_groups, no block MLP (block_mlp false), and the skeleton's n_heads (the largest divisor of d_model not
// above the layer's heads). Refuses an expand × hidden_size that is not a multiple of head_dim, or a num_heads (other
// than 0 or null) that differs from it.
void fla_mamba_head_keys(const FlaConfigView& c, json& keys);
// The refusals of a Mamba2-style layer that mnemo computes with the gated RMSNorm after the gate, one skip D per
// head, SiLU and unclamped dt (fla's Mamba2 and LogLinearMamba2 configs): rmsnorm false, norm_before_gate,
// D_has_hdim, another hidden_act, a dt_limit other than (0, inf).
void fla_check_mamba2_layer(const FlaConfigView& c);

// q/k/v projections and, when keys["use_short_conv"], their short convs: mnemo's HeadProjection (<p>_proj.proj,
// <p>_proj.conv) from fla's <p>_proj and <p>_conv1d.
void fla_map_qkv_projections(const json& keys, const FlaLayerPrefixes& at, FlaKeyMap& map);

// Where fla's model keeps the parts every model has: "<model>embeddings", "<model>layers.<i>.<mixer_norm>",
// "<model>layers.<i>.<mixer>.", "<model><final_norm>" (and "lm_head" at the top).
struct FlaSkeletonNames {
  std::string model = "model.", mixer_norm = "attn_norm", mixer = "attn", final_norm = "norm";
  std::string mlp_norm = "mlp_norm";  // "<model>layers.<i>.<mlp_norm>": the norm before the feed-forward part
  std::string embed_norm;             // with embed_norm: "<model><embed_norm>" (RWKV-7: "layers.0.pre_norm")
};

struct FlaMixerNames {
  std::string model_type;  // fla's config.json "model_type"
  bool block_mlp = true;    // false: fla's block has no MLP (Mamba2): norm -> mixer -> residual
  // The feed-forward part of fla's block: "swiglu" (fla's GatedMLP: the importer reads hidden_act,
  // intermediate_size and hidden_ratio) or "rwkv_channel_mix" (RWKV7FeedForward: to_mnemo reads them). Norms are
  // LayerNorm when to_mnemo sets block_norm "layernorm" (their bias zero when the config's norm_bias is false).
  std::string block_ffn = "swiglu";
  // The activation fla's block gives its GatedMLP when the block fixes it instead of reading the config's
  // hidden_act (LogLinearMamba2Block: "swish", while hidden_act is its conv's); empty: the config's hidden_act.
  std::string mlp_act;
  FlaSkeletonNames names;
  // Non-empty: fla has this model_type but mnemo does not compute it exactly; the import refuses with this reason.
  std::string refusal;
  json defaults;           // fla's defaults (fla/models/<f>/configuration_<f>.py) of the mixer's fields
  // The mixer's mnemo keys from the config, added to `keys` (which holds the skeleton: d_model, n_layers, n_heads,
  // ...); refuses (FlaConfigView::refuse) what mnemo does not compute exactly. Returns the mnemo family.
  std::function<std::string(const FlaConfigView& config, json& keys)> to_mnemo;
  // One layer's mixer parameters: mnemo name -> fla source, for the keys to_mnemo produced.
  std::function<void(const json& keys, const json& fla_config, const FlaLayerPrefixes& at, FlaKeyMap& map)> mixer_keys;
  // The export's side (`mnemo export --format hf`, engine/io/fla_export.cpp), for a family whose fla fields the
  // generic mapping does not cover: writes them into the candidate fla config, and resolves the automatic values of
  // `view` (the model's keys, compared with what the candidate imports to) as the mixer does. Optional.
  std::function<void(json& view, json& fla_config)> from_mnemo;
};

}  // namespace mnemo
