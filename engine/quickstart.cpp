#include "engine/quickstart.h"

#include <algorithm>
#include <map>

#include "runtime/registry.h"

namespace mnemo {

// MQAR (Zoology semantics, spec tasks.md §7) the way Zoology trains it: one run per family on a mixture of key-value
// counts, tested per count (Zoology's train_configs / test_configs / slice_keys, see tasks/mqar_task.cpp). V = 512,
// L = 64, training examples with N_KV = 4, 8, 16 in proportions 2 : 1 : 1, 768 test examples (256 per N_KV), d_model
// 64 with 2 heads, 2 layers, 128 sequences per step from 40 000 training examples, AdamW (17 % warm-up, cosine over
// 2400 steps), early stop at 0.99 test accuracy (over all slices), each family at its best learning rate of the
// probe sweep below (Zoology reports the best over learning rates). Transformer++ gets Zoology's short convolution.
// Why V = 512 (session 17): with V = 128 there are only 63 keys, which d_model 64 can embed almost orthogonally.
// Why 2400 steps (session 21): at 1200 linear attention was caught in its accuracy jump, so fp32 rounding decided
// its verdict (0.218 or 0.878 at N_KV 16 for equal math); on the 2400-step schedule it stops early at step ~1100.
// Why both linear attentions: the identity form (MoM, Lattice; spec §4.1) can hold N_KV <= d_head = 32 pairs without
// interference and recalls as DeltaNet does here; Katharopoulos et al.'s form (elu + 1 features, normalised), the
// paper every one of ours cites for linear attention, interferes (positive features are never orthogonal), and its
// recall falls with N_KV.
std::vector<std::string> quickstart_mqar_models() {
  return {"transformer", "linear_attn", "linear_attn_elu", "deltanet", "gated_deltanet", "mamba2"};
}

// Learning rate per family: the best of the probe sweep at 1200 steps (lr 2e-3 and 8e-3 for every family, also 4e-3
// for Transformer++, 1.6e-2 for Gated DeltaNet and 1.6e-2 ... 6.4e-2 for linear_attn_elu, whose accuracy rose with
// lr; configs/mqar_quickstart_lr.json, its description has the numbers).
double quickstart_mqar_lr(const std::string& model) {
  if (model == "transformer") return 4e-3;
  if (model == "gated_deltanet") return 1.6e-2;
  if (model == "mamba2") return 8e-3;
  if (model == "linear_attn_elu") return 3.2e-2;
  return 2e-3;  // linear_attn, deltanet and families the probe did not cover
}

// Language modelling: the d_model-64 column of configs/lm_scaling_cpu.json (byte tokenizer, context
// 256, 144 steps of 16 x 256 tokens = 0.59 M tokens, about 4 tokens per Transformer++ parameter).
std::vector<std::string> quickstart_lm_models() {
  return {"transformer", "linear_attn", "linear_attn_elu", "deltanet", "gated_deltanet", "mamba2"};
}

json quickstart_mqar_sweep(const std::vector<std::string>& models) {
  json cases = json::array();
  for (const std::string& m : models) {
    json c = {{"model", m}};
    if (m == "transformer") c["short_conv"] = true;
    c["lr"] = quickstart_mqar_lr(m);
    cases.push_back(c);
  }
  return {{"name", "quickstart"},
          {"base",
           {{"task", "mqar"}, {"vocab_size", 512}, {"seq_len", 64}, {"num_kv_pairs", 4},
            {"train_num_kv_pairs", {4, 8, 16}}, {"train_kv_weights", {2, 1, 1}}, {"test_num_kv_pairs", {4, 8, 16}},
            {"n_layers", 2}, {"n_heads", 2}, {"d_model", 64}, {"steps", 2400}, {"batch_size", 128},
            {"warmup_frac", 0.17}, {"weight_decay", 0.1}, {"n_train", 40000}, {"n_test", 768}, {"eval_every", 100},
            {"log_every", 100}, {"early_stop_acc", 0.99}, {"device", "cpu"}}},
          {"cases", cases}};
}

json quickstart_lm_sweep(const std::vector<std::string>& models) {
  return {{"name", "quickstart_lm"},
          {"base",
           {{"task", "lm"}, {"seq_len", 256}, {"batch_size", 16}, {"n_layers", 2}, {"d_model", 64},
            {"n_heads", 2}, {"steps", 144}, {"lr", 3e-3}, {"warmup_frac", 0.05}, {"min_lr_ratio", 0.1},
            {"weight_decay", 0.1}, {"grad_clip", 1.0}, {"eval_every", 50}, {"log_every", 25},
            {"val_tokens", 65536}, {"seed", 0}, {"tokenizer", "byte"}, {"corpus", "corpus/gutenberg"},
            {"device", "cpu"}}},
          {"grid", {{"model", models}}}};
}

json quickstart_catalog() {
  const std::string protocol =
      "MQAR (Zoology semantics and training mixture): vocabulary 512 (255 keys), sequence length 64, one run per "
      "family trained on examples with 4, 8 and 16 key-value pairs (proportions 2 : 1 : 1) and tested on each "
      "number separately (256 test examples each), d_model 64, 2 heads (d_head 32), 2 layers, batches of 128 from "
      "40 000 training examples, AdamW (17 % warm-up, cosine over 2400 steps) with early stop at 0.99 test accuracy; "
      "each family at its best learning rate of a probe sweep at 1200 steps (configs/mqar_quickstart_lr.json: 4e-3 "
      "Transformer++, 2e-3 linear attention and DeltaNet, 1.6e-2 Gated DeltaNet, 8e-3 Mamba2, 3.2e-2 Katharopoulos "
      "linear attention, whose accuracy rose with the rate up to 3.2e-2 and fell at 6.4e-2), where Zoology takes the "
      "best of four per cell and trains 32-64 epochs of 180 000 examples. Transformer++ has Zoology's short "
      "convolution before attention (on q, k, v, kernel 4, as the linear recurrent families have by default); in the "
      "language-modelling stage it is the plain Transformer++. Linear attention runs in two forms: `linear_attn`, "
      "the identity feature map without normaliser that MoM and Lattice write (spec models.md §4.1), and "
      "`linear_attn_elu`, Katharopoulos et al.'s elu + 1 features with the normaliser, the paper each of ours cites "
      "for linear attention. Then a language-modelling comparison at an equal budget: byte tokenizer, Gutenberg "
      "books, context 256, d_model 64, 144 steps of 4096 tokens (0.59 M tokens), validation perplexity on 65 536 "
      "held-out tokens (its ranking against Titans Table 1 is in the language-modelling section). "
      "What this budget can and cannot show (sessions 20-21): every family but linear_attn_elu reaches the early "
      "stop (about 0.98 at N_KV 16) within 1300 steps, so their order at N_KV 4 and 8 is within noise and the "
      "table of rank correlations says so. With N_KV <= 16 <= d_head = 32 the identity form's state can hold every "
      "pair, and it recalls as DeltaNet does (the papers' interference argument is about the overcapacity regime); "
      "on the old 1200-step schedule it was caught in its accuracy jump and fp32 rounding decided its verdict "
      "(0.218 or 0.878 at N_KV 16 for equal math), which the 2400-step schedule removes (0.976-0.978, early stop at "
      "step 1100 with the fused kernels and with the eager ops). The Katharopoulos form interferes (positive "
      "features are never orthogonal): its recall falls with N_KV and it is the only run still improving at step "
      "2400, so its gap to the delta rule mixes interference with slower learning, and it depends on the seed: seeds "
      "0 / 1 / 2 of this protocol gave 0.926 / 0.906 / 0.975 at N_KV 16 (seed 2 stopped early at step 1900), "
      "DeltaNet 0.978 / 0.982 / 0.985, so 'DeltaNet above linear attention' agrees for two seeds of three and is "
      "within the margin for the third. The papers' capacity gap for the "
      "identity form needs N_KV beyond the state (Zoology's L = 256 with N_KV up to 64; Lattice's N_KV 48-256 at L "
      "1024-2048), beyond this budget on two CPU cores.";
  const auto mqar = quickstart_mqar_models();
  // Families tried on the quickstart's own MQAR config (session 21, 1 thread), with what was measured.
  const std::map<std::string, std::string> measured_reasons = {
      {"titans_lmm",
       "budget, measured: on this protocol at lr 8e-3 still near chance (0.021 / 0.010 / 0.009 at N_KV 4 / 8 / 16) at "
       "step 400, at about 1 s a step (8 400 tokens/s), so its 2400-step schedule alone would take about 40 minutes "
       "of one core; `mnemo sweep --config configs/mqar_learning.json` runs it"}};
  json left_out = json::object();
  auto& reg = Registry::instance();
  for (const std::string& name : reg.model_names()) {
    if (std::find(mqar.begin(), mqar.end(), name) != mqar.end()) continue;
    if (auto m = measured_reasons.find(name); m != measured_reasons.end()) {
      left_out[name] = m->second;
      continue;
    }
    left_out[name] = reg.model(name).cpu_quickstart
                         ? "budget: the quickstart runs one or two families per group of the papers' MQAR "
                           "ranking; `mnemo sweep --config configs/mqar_learning.json` runs every family"
                         : "cost: a training step on the CPU is far beyond the 25-minute budget (see the "
                           "family's registration and the README)";
  }
  return {{"protocol", protocol}, {"left_out", left_out}};
}

}  // namespace mnemo
