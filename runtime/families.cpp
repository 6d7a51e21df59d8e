// The one place that lists every built-in model family (one line each), and the hybrid
// baselines of docs/models.md#hybrids (per-layer alternation of registered mixers). Each family's registration, in
// its folder, carries what the harness knows of it (runtime/registry.h FamilyTraits).
#include "runtime/registry.h"

namespace mnemo {

void register_attention_families(Registry& r);  // transformer, swa (runtime/attention/)
// -- linear-recurrent families (runtime/<family>/mixer.cpp) --
void register_delta_rule_families(Registry& r);  // deltanet, gated_deltanet (runtime/delta_rule/)
void register_linear_attn_family(Registry& r);   // linear_attn (runtime/linear_attn/)
void register_retnet_family(Registry& r);        // retnet (runtime/retnet/)
void register_gla_family(Registry& r);           // gla (runtime/gla/)
void register_mamba2_family(Registry& r);        // mamba2 (runtime/mamba2/)
void register_ttt_families(Registry& r);         // ttt_linear, ttt_mlp (runtime/ttt/)
void register_miras_families(Registry& r);       // moneta, yaad, memora (runtime/miras/)
void register_titans_families(Registry& r);      // titans_lmm, titans_mag, titans_mac, titans_mal (runtime/titans/)
void register_atlas_families(Registry& r);       // dla, swla, omeganet, atlas, atlas_pp, atlas hybrids (runtime/atlas/)
void register_lattice_families(Registry& r);     // lattice_dec, lattice_dot (runtime/lattice/)
void register_deep_transformer_families(Registry& r);  // deep_transformer, swdt, dot (runtime/deep_transformer/)
void register_mom_families(Registry& r);         // mom, mom_hybrid (runtime/mom/)
void register_kda_family(Registry& r);           // kda (runtime/kda/)
void register_delta_product_family(Registry& r);  // gated_deltaproduct (runtime/delta_product/)
void register_forgetting_attn_family(Registry& r);  // fox (runtime/forgetting_attn/)
void register_mamba3_family(Registry& r);  // mamba3 (runtime/mamba3/)
void register_mesa_net_family(Registry& r);       // mesa_net (runtime/mesa_net/)
void register_rwkv7_family(Registry& r);          // rwkv7 (runtime/rwkv7/)
void register_path_attn_family(Registry& r);      // path_attn (runtime/path_attn/)
void register_hgrn2_family(Registry& r);          // hgrn2 (runtime/hgrn2/)
void register_mamba_family(Registry& r);          // mamba (runtime/mamba/)
void register_gsa_family(Registry& r);            // gsa (runtime/gsa/)
void register_log_linear_gdn_family(Registry& r);  // log_linear_gdn (runtime/log_linear_gdn/)
void register_log_linear_mamba2_family(Registry& r);  // log_linear_mamba2 (runtime/log_linear_mamba2/)
void register_hope_families(Registry& r);          // self_modifying_titans, model hope (runtime/hope/)
// -- hybrids --

namespace {
ModelFamily hybrid(const std::string& name, const std::string& description, std::vector<std::string> pattern,
                   const std::string& colour, bool cpu_quickstart) {
  ModelFamily m;
  m.name = name;
  m.description = description;
  m.layer_pattern = std::move(pattern);
  m.overrides = json::object();
  m.style = {"hybrids", colour};
  m.cpu_quickstart = cpu_quickstart;
  return m;
}
}  // namespace

void register_hybrid_models(Registry& r) {
  // Samba uses Mamba (v1) in its paper; mnemo's samba uses Mamba2 layers [decision, docs/models.md#hybrids].
  r.add_model(hybrid("samba", "Samba: alternating mamba2 and swa layers (docs/models.md#hybrids)", {"mamba2", "swa"}, "orange", true));
  r.add_model(hybrid("gdn_h1", "Gated DeltaNet-H1: alternating gated_deltanet and swa layers (docs/models.md#hybrids)",
                     {"gated_deltanet", "swa"}, "blue", true));
  r.add_model(hybrid("gdn_h2", "Gated DeltaNet-H2: repeating (mamba2, gated_deltanet, swa) layers (docs/models.md#hybrids)",
                     {"mamba2", "gated_deltanet", "swa"}, "cyan", true));
  // Kimi Linear (arXiv 2510.26692): three KDA layers to one global attention layer, the attention without positional
  // encoding (NoPE); MLA there, mnemo's softmax attention here [decision, docs/models.md#hybrids].
  ModelFamily kimi = hybrid("kimi_linear",
                            "Kimi Linear: repeating (kda, kda, kda, transformer) layers, the attention layers without "
                            "RoPE (docs/models.md#hybrids)",
                            {"kda", "kda", "kda", "transformer"}, "purple", true);
  kimi.overrides = {{"use_rope", false}};
  r.add_model(kimi);
  // Miras' hybrids (arXiv 2504.13173 §5 "Hybrid Models"): each Miras layer followed by sliding-window attention, as
  // in Samba; each in its recurrent family's colour.
  r.add_model(hybrid("moneta_h", "Moneta-H: alternating moneta and swa layers (docs/models.md#hybrids)",
                     {"moneta", "swa"}, "brown", true));
  r.add_model(hybrid("yaad_h", "Yaad-H: alternating yaad and swa layers (docs/models.md#hybrids)", {"yaad", "swa"},
                     "pink", true));
  r.add_model(hybrid("memora_h", "Memora-H: alternating memora and swa layers (docs/models.md#hybrids)",
                     {"memora", "swa"}, "grey", true));
}

void register_builtin_families(Registry& r) {
  register_attention_families(r);
  register_delta_rule_families(r);
  register_linear_attn_family(r);
  register_retnet_family(r);
  register_gla_family(r);
  register_mamba_family(r);
  register_mamba2_family(r);
  register_titans_families(r);
  register_ttt_families(r);
  register_miras_families(r);
  register_atlas_families(r);
  register_lattice_families(r);
  register_deep_transformer_families(r);
  register_mom_families(r);
  register_kda_family(r);
  register_delta_product_family(r);
  register_forgetting_attn_family(r);
  register_mamba3_family(r);
  register_mesa_net_family(r);
  register_rwkv7_family(r);
  register_path_attn_family(r);
  register_hgrn2_family(r);
  register_gsa_family(r);
  register_log_linear_gdn_family(r);
  register_log_linear_mamba2_family(r);
  register_hope_families(r);
  register_hybrid_models(r);  // last: hybrids refer to the mixers above
}

}  // namespace mnemo
