// Weights in and out: the safetensors reader/writer, `mnemo export` and its loader, `mnemo import-fla`.
// The fla tests write fla-style files (fla's key names and layouts, random weights) and compare mnemo's logits with
// fla's forward written out here from fla's own code (fla/layers/attn.py, fla/layers/gated_deltanet.py,
// fla/ops/gated_delta_rule/naive.py, fla/modules/*): an independent path, so a wrong key, a missing transpose or a
// misplaced head split shows up as a wrong logit, not only as a shape error.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "runtime/backbone.h"
#include "engine/io/checkpoint.h"
#include "engine/io/export.h"
#include "engine/io/fla_checkpoint.h"
#include "engine/io/fla_export.h"
#include "engine/io/fla_import.h"
#include "engine/config/run_config.h"
#include "engine/io/safetensors.h"
#include "runtime/layers.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;
using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;

namespace {

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file with `header` as its JSON and `data` after it; `length` overrides the header length field.
void write_raw(const fs::path& p, const std::string& header, const std::string& data, int64_t length = -1) {
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  const uint64_t n = length >= 0 ? static_cast<uint64_t>(length) : header.size();
  for (int i = 0; i < 8; ++i) o.put(static_cast<char>((n >> (8 * i)) & 0xff));
  o << header << data;
}

bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  return a.numel() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

// A tiny language model saved as a mnemo checkpoint in dir (resolved config with task mqar, vocab 64).
Backbone save_tiny(const fs::path& dir, const json& keys, torch::ScalarType dtype) {
  json user = {{"task", "mqar"}, {"vocab_size", 64}, {"seq_len", 32}, {"d_model", 32}, {"n_layers", 2}, {"n_heads", 4}};
  user.update(keys);
  const json resolved = resolve_run_config(user);
  ModelConfig mc = model_config_from_json(resolved);
  mc.vocab_size = 64;
  torch::manual_seed(3);
  Backbone b = make_backbone("language_model", mc);
  b.module->to(dtype);
  b.module->eval();
  save_checkpoint(dir.string(), resolved, b, nullptr, TrainerState{});
  return b;
}

torch::Tensor sample_ids() {
  torch::manual_seed(11);
  return torch::randint(0, 64, {2, 12}, torch::kInt64);
}

// ---- fla's forward, written from fla's sources (fp64) ----
torch::Tensor rms(const torch::Tensor& x, const torch::Tensor& w, double eps) {  // layernorm.py rms_norm_ref
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}
torch::Tensor lin(const torch::Tensor& x, const torch::Tensor& w) { return torch::matmul(x, w.t()); }  // nn.Linear
torch::Tensor rope(const torch::Tensor& x, double theta) {  // rotary.py: non-interleaved, cos repeated '(2 d)'
  const int64_t T = x.size(1), D = x.size(3);
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  auto inv_freq = 1.0 / torch::pow(theta, torch::arange(0, D, 2, f64) / static_cast<double>(D));
  auto freqs = torch::outer(torch::arange(T, f64), inv_freq);
  auto cos = torch::cat({freqs.cos(), freqs.cos()}, -1).view({1, T, 1, D});
  auto sin = torch::cat({freqs.sin(), freqs.sin()}, -1).view({1, T, 1, D});
  auto x1 = x.narrow(-1, 0, D / 2), x2 = x.narrow(-1, D / 2, D / 2);
  return x * cos + torch::cat({-x2, x1}, -1) * sin;
}
torch::Tensor causal_conv_silu(const torch::Tensor& x, const torch::Tensor& w) {  // ShortConvolution: Conv1d pad K-1
  const int64_t K = w.size(2), T = x.size(1);
  auto xp = torch::nn::functional::pad(x, torch::nn::functional::PadFuncOptions({0, 0, K - 1, 0}));
  auto y = torch::zeros_like(x);
  for (int64_t j = 0; j < K; ++j) y = y + xp.narrow(1, j, T) * w.select(1, 0).select(1, j);
  return torch::silu(y);
}
torch::Tensor l2n(const torch::Tensor& x) { return x / torch::sqrt(x.pow(2).sum(-1, true) + 1e-6); }  // l2norm.py

using Weights = std::map<std::string, torch::Tensor>;

torch::Tensor fla_mlp(const Weights& w, const std::string& P, const torch::Tensor& x) {  // mlp.py GatedMLP
  return lin(torch::silu(lin(x, w.at(P + "mlp.gate_proj.weight"))) * lin(x, w.at(P + "mlp.up_proj.weight")),
             w.at(P + "mlp.down_proj.weight"));
}

// fla/layers/attn.py Attention (flash_attn causal, GQA: q head h reads kv head h / (H / Hkv)).
torch::Tensor fla_attention(const Weights& w, const std::string& A, const torch::Tensor& x, int64_t H, int64_t Hkv) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / H;
  auto q = rope(lin(x, w.at(A + "q_proj.weight")).view({B, T, H, D}), 10000.0);
  auto k = rope(lin(x, w.at(A + "k_proj.weight")).view({B, T, Hkv, D}), 10000.0);
  auto v = lin(x, w.at(A + "v_proj.weight")).view({B, T, Hkv, D});
  k = k.repeat_interleave(H / Hkv, 2);
  v = v.repeat_interleave(H / Hkv, 2);
  auto s = torch::matmul(q.transpose(1, 2), k.transpose(1, 2).transpose(-1, -2)) / std::sqrt(double(D));
  auto mask = torch::ones({T, T}, torch::kBool).triu(1);
  auto o = torch::matmul(torch::softmax(s.masked_fill(mask, -INFINITY), -1), v.transpose(1, 2));
  return lin(o.transpose(1, 2).reshape({B, T, H * D}), w.at(A + "o_proj.weight"));
}

// fla/layers/gated_deltanet.py with use_gate, short conv, and fla/ops/gated_delta_rule/naive.py's recurrence.
torch::Tensor fla_gated_deltanet(const Weights& w, const std::string& A, const torch::Tensor& x, int64_t H) {
  const int64_t B = x.size(0), T = x.size(1);
  auto q = causal_conv_silu(lin(x, w.at(A + "q_proj.weight")), w.at(A + "q_conv1d.weight"));
  auto k = causal_conv_silu(lin(x, w.at(A + "k_proj.weight")), w.at(A + "k_conv1d.weight"));
  auto v = causal_conv_silu(lin(x, w.at(A + "v_proj.weight")), w.at(A + "v_conv1d.weight"));
  const int64_t dk = q.size(2) / H, dv = v.size(2) / H;
  q = l2n(q.view({B, T, H, dk}));
  k = l2n(k.view({B, T, H, dk}));
  v = v.view({B, T, H, dv});
  auto beta = torch::sigmoid(lin(x, w.at(A + "b_proj.weight")));
  auto g = -w.at(A + "A_log").exp() * torch::softplus(lin(x, w.at(A + "a_proj.weight")) + w.at(A + "dt_bias"));
  auto S = torch::zeros({B, H, dk, dv}, x.options());
  std::vector<torch::Tensor> outs;
  for (int64_t t = 0; t < T; ++t) {
    S = S * g.select(1, t).exp().view({B, H, 1, 1});
    auto kt = k.select(1, t), vt = v.select(1, t);
    auto u = beta.select(1, t).unsqueeze(-1) * (vt - (kt.unsqueeze(-1) * S).sum(-2));
    S = S + kt.unsqueeze(-1) * u.unsqueeze(-2);
    outs.push_back(((q.select(1, t) / std::sqrt(double(dk))).unsqueeze(-1) * S).sum(-2));
  }
  auto o = torch::stack(outs, 1);  // [B, T, H, dv]
  auto gate = lin(x, w.at(A + "g_proj.weight")).view({B, T, H, dv});
  o = rms(o, w.at(A + "o_norm.weight"), 1e-6) * torch::silu(gate);  // FusedRMSNormGated, swish
  return lin(o.reshape({B, T, H * dv}), w.at(A + "o_proj.weight"));
}

// An fla causal LM forward (modeling_<f>.py: blocks, model.norm, lm_head or tied embeddings).
torch::Tensor fla_forward(const Weights& w, const torch::Tensor& ids, int64_t L, double eps, bool tied,
                          const std::function<torch::Tensor(const std::string&, const torch::Tensor&)>& mixer) {
  auto h = w.at("model.embeddings.weight").index_select(0, ids.flatten()).view({ids.size(0), ids.size(1), -1});
  for (int64_t i = 0; i < L; ++i) {
    const std::string P = "model.layers." + std::to_string(i) + ".";
    h = h + mixer(P + "attn.", rms(h, w.at(P + "attn_norm.weight"), eps));
    h = h + fla_mlp(w, P, rms(h, w.at(P + "mlp_norm.weight"), eps));
  }
  h = rms(h, w.at("model.norm.weight"), eps);
  return lin(h, w.at(tied ? "model.embeddings.weight" : "lm_head.weight"));
}

// Random fp32 weights of the given shapes (norm weights around 1), written as model.safetensors; returns them in fp64.
using Shapes = std::map<std::string, std::vector<int64_t>>;

Weights write_fla_model(const fs::path& dir, const json& config, const Shapes& shapes, uint64_t seed) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(2);
  torch::manual_seed(seed);
  Tensors t;
  Weights w;
  for (const auto& [name, shape] : shapes) {
    auto x = torch::randn(shape) * 0.2;
    if (name.find("norm.weight") != std::string::npos) x = x + 1.0;
    if (name.find("A_log") != std::string::npos) x = torch::rand(shape).mul(15).add(1).log();
    t.emplace_back(name, x);
    w[name] = x.to(torch::kFloat64);
  }
  write_safetensors((dir / "model.safetensors").string(), t, {{"format", "pt"}});
  return w;
}

// fla's shapes of a block's norms and GatedMLP (hidden d, intermediate I) for layers 0..L-1, plus embeddings + norm.
Shapes fla_skeleton(int64_t d, int64_t I, int64_t V, int64_t L, bool tied) {
  Shapes s = {{"model.embeddings.weight", {V, d}}, {"model.norm.weight", {d}}};
  if (!tied) s["lm_head.weight"] = {V, d};
  for (int64_t i = 0; i < L; ++i) {
    const std::string P = "model.layers." + std::to_string(i) + ".";
    s[P + "attn_norm.weight"] = {d};
    s[P + "mlp_norm.weight"] = {d};
    s[P + "mlp.gate_proj.weight"] = {I, d};
    s[P + "mlp.up_proj.weight"] = {I, d};
    s[P + "mlp.down_proj.weight"] = {d, I};
  }
  return s;
}

// Adds `per_layer` (names relative to model.layers.N.attn.) for every layer.
void add_mixer(Shapes& s, int64_t L, const Shapes& per_layer) {
  for (int64_t i = 0; i < L; ++i)
    for (const auto& [k, v] : per_layer) s["model.layers." + std::to_string(i) + ".attn." + k] = v;
}

}  // namespace

TEST_CASE("safetensors: every dtype round-trips byte for byte", "[export]") {
  auto dir = test::temp_dir("st_roundtrip");
  torch::manual_seed(0);
  Tensors t = {{"f64", torch::randn({3, 2}, torch::kFloat64)},
               {"f32", torch::randn({5}, torch::kFloat32)},
               {"f16", torch::randn({2, 3}).to(torch::kFloat16)},
               {"bf16", torch::randn({7}).to(torch::kBFloat16)},
               {"i64", torch::randint(-1000, 1000, {4}, torch::kInt64)},
               {"i32", torch::randint(-1000, 1000, {2, 2}, torch::kInt32)},
               {"i16", torch::randint(-1000, 1000, {3}, torch::kInt16)},
               {"i8", torch::randint(-100, 100, {5}, torch::kInt8)},
               {"u8", torch::randint(0, 255, {1, 3}, torch::kUInt8)},
               {"bool", torch::rand({6}) > 0.5},
               {"scalar", torch::scalar_tensor(2.5, torch::kFloat64)},
               {"empty", torch::zeros({0, 3})},
               {"strided", torch::randn({4, 4}).t()}};  // made contiguous on write
  const fs::path a = dir / "a.safetensors", b = dir / "b.safetensors";
  write_safetensors(a.string(), t, {{"format", "pt"}, {"note", "x"}});
  SafetensorsFile f(a.string());
  REQUIRE(f.metadata() == std::map<std::string, std::string>{{"format", "pt"}, {"note", "x"}});
  REQUIRE(f.entries().size() == t.size());
  for (const auto& [name, x] : t) {
    INFO(name);
    REQUIRE(same_bytes(f.load(name), x.contiguous()));
  }
  REQUIRE(f.entries().at("bf16").dtype == "BF16");
  REQUIRE(f.entries().at("scalar").shape.empty());
  // The header is padded with spaces to a multiple of 8; offsets are aligned (larger elements first).
  const std::string raw = file_bytes(a);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  REQUIRE(n % 8 == 0);
  for (const auto& [name, e] : f.entries()) REQUIRE(e.begin % safetensors_dtype_size(e.dtype) == 0);
  // Writing what was read gives the same file.
  Tensors again;
  for (const auto& [name, x] : f.load_all()) again.emplace_back(name, x);
  write_safetensors(b.string(), again, f.metadata());
  REQUIRE(file_bytes(a) == file_bytes(b));
  REQUIRE_THROWS_WITH(write_safetensors((dir / "c.safetensors").string(), {{"x", t[0].second}, {"x", t[1].second}}),
                      Catch::Contains("'x' is given twice"));
  const Tensors complex = {{"c", torch::zeros({2}, torch::kComplexFloat)}};
  REQUIRE_THROWS_WITH(write_safetensors((dir / "c.safetensors").string(), complex),
                      Catch::Contains("tensor 'c'"));
}

TEST_CASE("safetensors: malformed files are refused naming the file and the tensor", "[export]") {
  auto dir = test::temp_dir("st_malformed");
  const std::string p = (dir / "m.safetensors").string();
  const std::string data16(16, '\0');
  auto refused = [&](const std::string& header, const std::string& data, const std::string& what, int64_t len = -1) {
    write_raw(p, header, data, len);
    REQUIRE_THROWS_WITH(SafetensorsFile(p), Catch::Contains(p) && Catch::Contains(what));
  };
  {  // shorter than the length field
    std::ofstream(p, std::ios::binary) << "abc";
    REQUIRE_THROWS_WITH(SafetensorsFile(p), Catch::Contains(p) && Catch::Contains("shorter than"));
  }
  const std::string ok = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  write_raw(p, ok, data16);
  REQUIRE(SafetensorsFile(p).load("a").numel() == 4);
  refused(ok, data16, "header length 1000 exceeds", 1000);
  refused(ok, data16.substr(0, 12), "tensor 'a': data_offsets [0,16] run past");  // truncated
  refused(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})", data16, "tensor 'a': data_offsets");
  refused(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data16, "tensor 'a': dtype F32 and shape [3]");
  refused(R"({"a":{"dtype":"F64","shape":[2,2],"data_offsets":[0,16]}})", data16, "need 32 bytes");
  refused(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          data16.substr(0, 12), "tensor 'b': its bytes [4, 12) overlap those of 'a'");
  refused(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
          data16.substr(0, 12), "tensor 'b': a gap");
  refused(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data16, "8 bytes after the last tensor");
  refused(R"({"a":{"dtype":"F8_E4M3","shape":[16],"data_offsets":[0,16]}})", data16, "tensor 'a': dtype 'F8_E4M3'");
  refused(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data16, "tensor 'a': shape [-4]");
  refused(R"({"a":{"dtype":"F32","shape":[4]}})", data16, "tensor 'a': expected");
  refused(R"({"a": nope})", data16, "not valid JSON");
  refused(R"({"__metadata__":{"k":1}})", "", "__metadata__ value of 'k'");
}

TEST_CASE("export: a checkpoint as safetensors loads back with identical logits", "[export]") {
  for (const auto& [family, dtype] : std::vector<std::pair<std::string, torch::ScalarType>>{
           {"transformer", torch::kFloat64}, {"gated_deltanet", torch::kFloat32}}) {
    DYNAMIC_SECTION(family) {
      auto dir = test::temp_dir("export_" + family);
      Backbone original = save_tiny(dir, {{"model", family}}, dtype);
      const torch::Tensor ids = sample_ids();
      torch::NoGradGuard g;
      const torch::Tensor expected = original.forward(ids);

      const ExportResult r = export_checkpoint(dir.string(), "safetensors", "");
      REQUIRE(r.safetensors_path == (dir / "export" / "model.safetensors").string());
      REQUIRE(default_export_path((dir / "checkpoint").string()) == (fs::canonical(dir) / "export" / "model").string());
      SafetensorsFile f(r.safetensors_path);
      REQUIRE(f.metadata().at("format") == kSafetensorsExportFormat);
      for (const char* key :
           {"embed.weight", "block0.mixer_norm.weight", "block1.mlp.down.weight", "final_norm.weight"})
        REQUIRE(f.contains(key));
      REQUIRE_FALSE(f.contains("lm_head.weight"));  // tied
      REQUIRE(f.entries().at("embed.weight").dtype == (dtype == torch::kFloat64 ? "F64" : "F32"));
      REQUIRE(static_cast<int64_t>(f.entries().size()) == r.tensors);

      Backbone loaded = load_backbone_safetensors(r.safetensors_path, r.json_path, torch::kCPU);
      REQUIRE(torch::equal(loaded.forward(ids), expected));

      // A missing key, an extra key, a wrong shape: an Error naming the key.
      auto tensors = f.load_all();
      const std::string bad = (dir / "bad.safetensors").string();
      auto rewrite = [&](const std::map<std::string, torch::Tensor>& m) {
        Tensors v(m.begin(), m.end());
        write_safetensors(bad, v);
      };
      auto missing = tensors;
      missing.erase("block1.mlp_norm.weight");
      rewrite(missing);
      REQUIRE_THROWS_WITH(load_backbone_safetensors(bad, r.json_path, torch::kCPU),
                          Catch::Contains("'block1.mlp_norm.weight'") && Catch::Contains("missing"));
      auto extra = tensors;
      extra["block9.mixer.q_proj.weight"] = torch::zeros({2, 2});
      rewrite(extra);
      REQUIRE_THROWS_WITH(load_backbone_safetensors(bad, r.json_path, torch::kCPU),
                          Catch::Contains("'block9.mixer.q_proj.weight'") && Catch::Contains("no place"));
      auto reshaped = tensors;
      reshaped["embed.weight"] = torch::zeros({65, 32}, tensors["embed.weight"].options());
      rewrite(reshaped);
      REQUIRE_THROWS_WITH(load_backbone_safetensors(bad, r.json_path, torch::kCPU),
                          Catch::Contains("'embed.weight' is [65,32] in the file, [64,32] in the model"));
      REQUIRE_THROWS_WITH(export_checkpoint(dir.string(), "gguf", ""), Catch::Contains("unknown --format 'gguf'"));
    }
  }
}

TEST_CASE("import-fla: a transformer in fla's layout gives fla's logits", "[export][fla]") {
  auto dir = test::temp_dir("fla_transformer");
  const int64_t d = 32, L = 2, H = 4, Hkv = 2, V = 64, I = 256;  // I: fla's rule 256*ceil(int(32*4*2/3)/256)
  const json config = {{"model_type", "transformer"}, {"architectures", {"TransformerForCausalLM"}},
                       {"hidden_size", d}, {"num_hidden_layers", L}, {"num_heads", H}, {"num_kv_heads", Hkv},
                       {"vocab_size", V}, {"norm_eps", 1e-5}, {"torch_dtype", "float32"},
                       {"transformers_version", "4.50.0"}, {"fuse_norm", true}};
  auto shapes = fla_skeleton(d, I, V, L, /*tied=*/false);
  add_mixer(shapes, L, {{"q_proj.weight", {d, d}}, {"k_proj.weight", {Hkv * d / H, d}},
                        {"v_proj.weight", {Hkv * d / H, d}}, {"o_proj.weight", {d, d}}});
  const Weights w = write_fla_model(dir / "fla", config, shapes, 5);
  const FlaImportResult r = import_fla((dir / "fla").string(), (dir / "run").string(), "mqar", {{"seq_len", 32}});
  REQUIRE(r.family == "transformer");
  REQUIRE(r.tensors == static_cast<int64_t>(shapes.size()));
  REQUIRE(r.config["n_kv_heads"] == Hkv);
  REQUIRE(r.config["norm_eps"] == 1e-5);

  Backbone m = load_backbone((dir / "run").string(), torch::kCPU);
  m.module->to(torch::kFloat64);
  const torch::Tensor ids = sample_ids();
  torch::NoGradGuard g;
  auto expected = fla_forward(w, ids, L, 1e-5, false, [&](const std::string& A, const torch::Tensor& x) {
    return fla_attention(w, A, x, H, Hkv);
  });
  REQUIRE(test::max_rel_err(m.forward(ids), expected) < 1e-12);
  REQUIRE_THROWS_WITH(import_fla((dir / "fla").string(), (dir / "run").string(), "mqar", {{"seq_len", 32}}),
                      Catch::Contains("already holds a mnemo checkpoint"));
}

TEST_CASE("import-fla: a gated_deltanet in fla's layout gives fla's logits (tied head)", "[export][fla]") {
  auto dir = test::temp_dir("fla_gdn");
  const int64_t d = 32, L = 2, H = 2, dk = 16, dv = 32, V = 64, I = 256;
  const json config = {{"model_type", "gated_deltanet"}, {"hidden_size", d}, {"num_hidden_layers", L},
                       {"num_heads", H}, {"head_dim", dk}, {"expand_v", 2}, {"vocab_size", V},
                       {"tie_word_embeddings", true}, {"attn_mode", "chunk"}};
  auto shapes = fla_skeleton(d, I, V, L, /*tied=*/true);
  add_mixer(shapes, L, {{"q_proj.weight", {H * dk, d}}, {"k_proj.weight", {H * dk, d}}, {"v_proj.weight", {H * dv, d}},
                        {"a_proj.weight", {H, d}}, {"b_proj.weight", {H, d}}, {"A_log", {H}}, {"dt_bias", {H}},
                        {"q_conv1d.weight", {H * dk, 1, 4}}, {"k_conv1d.weight", {H * dk, 1, 4}},
                        {"v_conv1d.weight", {H * dv, 1, 4}}, {"g_proj.weight", {H * dv, d}},
                        {"o_norm.weight", {dv}}, {"o_proj.weight", {d, H * dv}}});
  const Weights w = write_fla_model(dir / "fla", config, shapes, 6);
  const FlaImportResult r = import_fla((dir / "fla").string(), (dir / "run").string(), "mqar", {{"seq_len", 32}});
  REQUIRE(r.family == "gated_deltanet");
  REQUIRE(r.config["head_dim"] == dk);
  REQUIRE(r.config["expand_v"] == 2.0);

  Backbone m = load_backbone((dir / "run").string(), torch::kCPU);
  m.module->to(torch::kFloat64);
  const torch::Tensor ids = sample_ids();
  torch::NoGradGuard g;
  auto expected = fla_forward(w, ids, L, 1e-6, true, [&](const std::string& A, const torch::Tensor& x) {
    return fla_gated_deltanet(w, A, x, H);
  });
  REQUIRE(test::max_rel_err(m.forward(ids), expected) < 1e-10);
}

TEST_CASE("import-fla: gla, retnet and delta_net files in fla's shapes are covered key for key", "[export][fla]") {
  // Key coverage + shapes (written here from fla/layers/{gla,multiscale_retention,delta_net}.py): the import consumes
  // every fla key and fills every mnemo parameter; the logits of these are left to the two tests above, whose
  // skeleton and MLP are shared, and to the mixers' own kernel tests.
  const int64_t d = 32, L = 1, H = 4, V = 64;
  struct Case {
    json config;
    Shapes mixer;
    int64_t I;
  };
  const std::vector<Case> cases = {
      {{{"model_type", "gla"}, {"num_heads", H}, {"use_short_conv", true}, {"fuse_norm", false}},  // expand_k .5
       {{"q_proj.weight", {16, d}}, {"k_proj.weight", {16, d}}, {"v_proj.weight", {32, d}}, {"g_proj.weight", {32, d}},
        {"q_conv1d.weight", {16, 1, 4}}, {"k_conv1d.weight", {16, 1, 4}}, {"v_conv1d.weight", {32, 1, 4}},
        {"gk_proj.0.weight", {16, d}}, {"gk_proj.1.weight", {16, 16}}, {"gk_proj.1.bias", {16}},
        {"g_norm.weight", {8}}, {"o_proj.weight", {d, 32}}},
       256},
      {{{"model_type", "retnet"}, {"num_heads", H}},  // expand_k 1, expand_v 2, hidden_ratio 2
       {{"q_proj.weight", {32, d}}, {"k_proj.weight", {32, d}}, {"v_proj.weight", {64, d}}, {"g_proj.weight", {64, d}},
        {"g_norm_swish_gate.weight", {16}}, {"o_proj.weight", {d, 64}}},
       256},
      {{{"model_type", "delta_net"}, {"num_heads", H}, {"use_gate", false}},
       {{"q_proj.weight", {32, d}}, {"k_proj.weight", {32, d}}, {"v_proj.weight", {32, d}}, {"b_proj.weight", {H, d}},
        {"q_conv1d.weight", {32, 1, 4}}, {"k_conv1d.weight", {32, 1, 4}}, {"v_conv1d.weight", {32, 1, 4}},
        {"o_norm.weight", {8}}, {"o_proj.weight", {d, 32}}},
       256}};
  for (const Case& c : cases) {
    const std::string type = c.config["model_type"];
    DYNAMIC_SECTION(type) {
      auto dir = test::temp_dir("fla_cover_" + type);
      json config = c.config;
      config.update({{"hidden_size", d}, {"num_hidden_layers", L}, {"vocab_size", V}});
      auto shapes = fla_skeleton(d, c.I, V, L, false);
      add_mixer(shapes, L, c.mixer);
      write_fla_model(dir / "fla", config, shapes, 7);
      const FlaImportResult r = import_fla((dir / "fla").string(), (dir / "run").string(), "mqar", {{"seq_len", 32}});
      REQUIRE(r.tensors == static_cast<int64_t>(shapes.size()));
      Backbone m = load_backbone((dir / "run").string(), torch::kCPU);
      torch::NoGradGuard g;
      REQUIRE(torch::isfinite(m.forward(sample_ids())).all().item<bool>());
      // An fla key mnemo has no place for (a q/k norm) is refused, naming it.
      shapes["model.layers.0.attn.q_norm.weight"] = {8};
      write_fla_model(dir / "fla2", config, shapes, 7);
      REQUIRE_THROWS_WITH(import_fla((dir / "fla2").string(), (dir / "run2").string(), "mqar", {{"seq_len", 32}}),
                          Catch::Contains("'model.layers.0.attn.q_norm.weight'") && Catch::Contains("no place"));
    }
  }
}

TEST_CASE("import-fla: configurations mnemo does not compute exactly are refused, naming the difference",
          "[export][fla]") {
  auto refused = [](json config, const std::string& what) {
    config.update({{"hidden_size", 32}, {"num_hidden_layers", 2}, {"vocab_size", 64}});
    if (!config.contains("num_heads")) config["num_heads"] = 4;
    REQUIRE_THROWS_WITH(fla_config_to_mnemo(config, "config.json"),
                        Catch::Contains("config.json") && Catch::Contains(what));
  };
  refused({{"model_type", "mamba2"}, {"head_dim", 16}, {"norm_before_gate", true}}, "norm_before_gate");
  refused({{"model_type", "mamba2"}, {"head_dim", 16}, {"dt_limit", {0.0, 6.0}}}, "dt_limit");
  refused({{"model_type", "mamba2"}, {"head_dim", 48}}, "not a multiple of head_dim 48");
  refused({{"model_type", "rwkv6"}}, "'rwkv6' has no mnemo import");
  refused({{"model_type", "gsa"}, {"feature_map", "relu"}}, "feature_map");
  refused({{"model_type", "gsa"}, {"use_output_gate", true}}, "use_output_gate");
  refused({{"model_type", "transformer"}, {"qk_norm", true}}, "qk_norm");
  refused({{"model_type", "transformer"}, {"qkv_bias", true}}, "qkv_bias");
  refused({{"model_type", "transformer"}, {"intermediate_size", 100}}, "intermediate_size 100");
  refused({{"model_type", "transformer"}, {"hidden_act", "powlu"}}, "hidden_act");
  refused({{"model_type", "transformer"}, {"attnres_block_size", 2}}, "attnres_block_size");
  refused({{"model_type", "transformer"}, {"some_new_field", 1}}, "'some_new_field'");
  refused({{"model_type", "gla"}, {"norm_eps", 1e-5}}, "norm_eps");
  refused({{"model_type", "gla"}, {"num_kv_heads", 2}}, "num_kv_heads");
  refused({{"model_type", "gla"}, {"attn", {{"layers", {1}}, {"num_heads", 4}}}}, "hybrid");
  refused({{"model_type", "retnet"}, {"feature_map", "relu"}}, "feature_map");
  refused({{"model_type", "delta_net"}, {"use_beta", false}}, "use_beta");
  refused({{"model_type", "delta_net"}, {"qk_activation", "relu"}}, "qk_activation");
  refused({{"model_type", "gated_deltanet"}, {"num_heads", 2}, {"head_dim", 16}, {"num_v_heads", 4}}, "num_v_heads");
  // Accepted: window_size -> swa, a wider MLP given as intermediate_size.
  const FlaModel m = fla_config_to_mnemo({{"model_type", "transformer"}, {"hidden_size", 32}, {"num_heads", 4},
                                          {"window_size", 8}, {"intermediate_size", 512}, {"vocab_size", 64}},
                                         "config.json");
  REQUIRE(m.family == "swa");
  REQUIRE(m.model_keys["window"] == 8);
  REQUIRE(swiglu_hidden_size(32, m.model_keys["mlp_ratio"].get<double>()) == 512);
}

TEST_CASE("mnemo import-fla on the command line gives a checkpoint mnemo eval loads", "[export][fla][cli]") {
  auto dir = test::temp_dir("fla_cli");
  const int64_t d = 32, L = 1, V = 64;
  auto shapes = fla_skeleton(d, 256, V, L, false);
  add_mixer(shapes, L, {{"q_proj.weight", {d, d}}, {"k_proj.weight", {d, d}}, {"v_proj.weight", {d, d}},
                        {"o_proj.weight", {d, d}}});
  write_fla_model(dir / "fla", {{"model_type", "transformer"}, {"hidden_size", d}, {"num_hidden_layers", L},
                                {"num_heads", 4}, {"vocab_size", V}}, shapes, 8);
  const std::string run = (dir / "run").string();
  auto imp = test::run_mnemo("import-fla --model-dir " + (dir / "fla").string() + " --out " + run +
                             " --set seq_len=32 --set num_kv_pairs=4");
  INFO(imp.output);
  REQUIRE(imp.exit_code == 0);
  REQUIRE_THAT(imp.output, Catch::Contains("\"family\":\"transformer\""));
  auto ev = test::run_mnemo("eval --checkpoint " + run + " --n 8 --db " + (dir / "db.sqlite").string());
  INFO(ev.output);
  REQUIRE(ev.exit_code == 0);
  REQUIRE_THAT(ev.output, Catch::Contains("\"accuracy\""));
  // A key derived from the fla config cannot be overridden.
  REQUIRE_THROWS_WITH(import_fla((dir / "fla").string(), (dir / "r2").string(), "mqar", {{"d_model", 64}}),
                      Catch::Contains("--set d_model would change the imported model"));
}

TEST_CASE("mnemo export on the command line", "[export][cli]") {
  auto dir = test::temp_dir("export_cli");
  save_tiny(dir, {{"model", "transformer"}}, torch::kFloat32);
  auto ex = test::run_mnemo("export --checkpoint " + dir.string() + " --format safetensors");
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  REQUIRE(fs::exists(dir / "export" / "model.safetensors"));
  REQUIRE(fs::exists(dir / "export" / "model.json"));
  auto bad = test::run_mnemo("export --checkpoint " + dir.string() + " --format onnx");
  REQUIRE(bad.exit_code == 1);
  REQUIRE_THAT(bad.output, Catch::Contains("mnemo: error: export: unknown --format 'onnx' (supported: safetensors, hf)"));

  // `mnemo eval` takes the export wherever it takes a checkpoint, with the checkpoint's result.
  const std::string db = (dir / "db.sqlite").string();
  auto accuracy = [&](const std::string& model) {
    auto ev = test::run_mnemo("eval --checkpoint " + model + " --n 16 --seed 5 --db " + db);
    INFO(ev.output);
    REQUIRE(ev.exit_code == 0);
    std::string out = ev.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    const json last_line = json::parse(out.substr(out.rfind('\n') + 1));  // stdout's JSON comes last
    return last_line.at("metrics").at("accuracy").get<double>();
  };
  const double from_checkpoint = accuracy(dir.string());
  const fs::path moved = dir / "elsewhere";
  fs::create_directories(moved);
  fs::copy(dir / "export", moved / "export");
  REQUIRE(accuracy((moved / "export").string()) == from_checkpoint);
  REQUIRE(accuracy((moved / "export" / "model.safetensors").string()) == from_checkpoint);
  REQUIRE(accuracy(moved.string()) == from_checkpoint);  // a run folder with an export and no checkpoint
  REQUIRE_FALSE(find_export(dir.string()).has_value());  // the checkpoint wins over the export beside it
  fs::remove(moved / "export" / "model.json");
  auto no_config = test::run_mnemo("eval --checkpoint " + (moved / "export").string() + " --n 4 --db " + db);
  REQUIRE(no_config.exit_code == 1);
  REQUIRE_THAT(no_config.output, Catch::Contains("mnemo: error: export ") && Catch::Contains("model.json is missing"));
}

TEST_CASE("load_weights refuses a checkpoint saved at another precision", "[export]") {
  auto dir = test::temp_dir("dtype_mismatch");
  Backbone saved = save_tiny(dir, {{"model", "transformer"}}, torch::kFloat64);  // the config says fp32
  json user = {{"task", "mqar"}, {"vocab_size", 64}, {"seq_len", 32}, {"d_model", 32}, {"n_layers", 2},
               {"n_heads", 4}, {"model", "transformer"}};
  ModelConfig mc = model_config_from_json(resolve_run_config(user));
  mc.vocab_size = 64;
  Backbone fp32 = make_backbone("language_model", mc);
  REQUIRE_THROWS_WITH(load_weights(dir.string(), fp32),
                      Catch::Contains("'embed.weight' is stored as Double, the model holds Float") &&
                          Catch::Contains("another precision"));
  Backbone fp64 = make_backbone("language_model", mc);
  fp64.module->to(torch::kFloat64);
  load_weights(dir.string(), fp64);
  torch::NoGradGuard g;
  REQUIRE(torch::equal(fp64.forward(sample_ids()), saved.forward(sample_ids())));
}
