// How fla's model is computed here (fla model_type -> mnemo family: verdict; how established; what is refused):
//  hgrn2 -> hgrn2: exact; checked on logits of fla's own model (tests/data/fla_models/hgrn2, made by
//    scripts/make_fla_models.py). fla/layers/hgrn2.py: q/f/i Linear without bias (+ ShortConvolution without
//    activation or bias), q = swish(q), g = logsigmoid(f), with the model's lower bound of layer l > 0
//    g = logaddexp(log lb, log1p(-lb) + g), k = 1 - exp(g), chunk_gla / fused_recurrent_gla (scale K^-0.5), RMSNorm
//    over hidden_size then o_proj (rms_norm_linear, eps 1e-5 whatever norm_eps is); fla/models/hgrn2: lower_bounds
//    [L, d] zeros, softmax over layers, cumsum minus the first row; vs runtime/hgrn2/mixer.cpp. Refused: num_heads ×
//    expand_ratio != hidden_size (mnemo's keys and values share the head dim d / H).
#include "runtime/hgrn2/fla_names.h"

namespace mnemo {

FlaMixerNames hgrn2_fla_names() {
  FlaMixerNames n;
  n.model_type = "hgrn2";
  n.defaults = {{"num_heads", nullptr}, {"expand_ratio", 128},        {"use_short_conv", false}, {"conv_size", 4},
                {"use_lower_bound", true}, {"elementwise_affine", true}, {"attn_mode", "chunk"},   {"attn", nullptr}};
  n.to_mnemo = [](const FlaConfigView& c, json& keys) -> std::string {
    const int64_t d = keys.at("d_model"), H = keys.at("n_heads");
    c.require_heads_divide(d, H);
    if (!c.is_null("expand_ratio") && H * c.integer("expand_ratio") != d)
      c.refuse("num_heads " + std::to_string(H) + " x expand_ratio " + std::to_string(c.integer("expand_ratio")) +
               " != hidden_size " + std::to_string(d) + ": mnemo's keys and values share the head dim");
    keys["use_short_conv"] = c.flag("use_short_conv");
    keys["conv_size"] = c.integer("conv_size");
    keys["use_lower_bound"] = c.flag("use_lower_bound");
    return "hgrn2";
  };
  n.from_mnemo = [](json& view, json& c) {  // the fields to_mnemo reads, back from the mixer's arguments
    c["expand_ratio"] = view.at("d_model").get<int64_t>() / view.at("n_heads").get<int64_t>();
    c["use_lower_bound"] = view.value("use_lower_bound", true);
  };
  n.mixer_keys = [](const json& keys, const json& fla_config, const FlaLayerPrefixes& at, FlaKeyMap& map) {
    for (const char* p : {"q", "f", "i", "o"}) map[at.mnemo + p + "_proj.weight"] = {{at.fla + p + "_proj.weight"}};
    if (keys.at("use_short_conv").get<bool>())
      for (const char* p : {"q", "f", "i"}) map[at.mnemo + p + "_conv.weight"] = {{at.fla + p + "_conv1d.weight"}};
    if (fla_config.value("elementwise_affine", true))
      map[at.mnemo + "g_norm.weight"] = {{at.fla + "g_norm.weight"}};
    else
      map[at.mnemo + "g_norm.weight"] = {{}, FlaSource::Fill::ones};
    // The model-level lower bounds sit on mnemo's first hgrn2 layer (block 0: fla's HGRN2 has no other layers).
    if (keys.at("use_lower_bound").get<bool>() && keys.at("n_layers").get<int64_t>() > 1 &&
        at.mnemo.rfind("block0.", 0) == 0)
      map[at.mnemo + "lower_bounds"] = {{at.fla.substr(0, at.fla.find("layers.")) + "lower_bounds"}};
  };
  return n;
}

}  // namespace mnemo
