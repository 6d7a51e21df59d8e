// Devices and the precision policy (docs/models.md#numerical-stability).
//  [precision]    on the CPU (every CI run): bf16 autocast through AutocastScope engages and restores; every mixer
//                 takes a training step under it with finite gradients and keeps its recurrent state in fp32.
//  [.cuda-*]      the same and more on a CUDA device; hidden from the plain run and registered with CTest as
//                 cuda.<group> with `--require-cuda` (tests/main.cpp), so a machine without CUDA reports them
//                 skipped: train_step (every mixer, bf16 autocast, AdamW), forms (every kernel op's forms agree
//                 in fp32), decode (prefill + decode == forward, fp64 and fp32), fixtures (every oracle fixture in
//                 fp64), attention (the fused SDPA path == the hand-written one), precision (models), cli (train,
//                 check-kernel and bench end to end), kernels_packed (every mixer's packed form on the device).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/common.h"
#include "core/torch_compat.h"
#include "engine/tools/bench.h"
#include "engine/config/run_config.h"
#include "runtime/attention/attention.h"
#include "runtime/cuda_device.h"
#include "runtime/device.h"
#include "runtime/kernels/precision.h"
#include "runtime/mixed_precision.h"
#include "runtime/model.h"
#include "runtime/ops/fixture.h"
#include "runtime/ops/kernel_ops.h"
#include "runtime/packed_sequences.h"
#include "runtime/registry.h"
#include "runtime/kernels/kernel_counts.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using test::build_mixer;
using test::contract_args;
using test::max_rel_err;
using test::prefill_decode;

namespace {

constexpr int64_t kB = 2, kT = 13, kD = 32, kHeads = 2;

// Equivalence checks compare fp32 results: no TF32 in cuBLAS/cuDNN while they run.
void exact_fp32_math() {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
}

// One AdamW step of mixer `name` (contract sizes, fp32 parameters) under bf16 autocast on `device`: the output
// keeps its shape and is finite, every parameter gets a finite gradient that is not all zero, and the step
// changes every parameter; a forward with a LayerState keeps the linear-recurrent state ("memory") in fp32.
void check_bf16_step(const std::string& name, const torch::Device& device) {
  auto mixer = build_mixer(name, kD, kHeads, contract_args(name), 11);
  mixer->to(device);
  torch::manual_seed(12);
  auto x = torch::randn({kB, kT, kD}).to(device);
  std::vector<torch::Tensor> before;
  for (const auto& p : mixer->parameters()) before.push_back(p.detach().clone());
  torch::optim::AdamW adamw(mixer->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.0));
  torch::Tensor loss;
  reset_kernel_pass_counts();
  {
    const AutocastScope autocast(device, Precision::bf16);
    auto y = mixer->forward(x, nullptr);
    REQUIRE(y.sizes() == x.sizes());
    loss = y.to(torch::kFloat32).pow(2).mean();
  }
  REQUIRE(std::isfinite(loss.item<double>()));
  loss.backward();
  // On CUDA every fused pass of the bf16 step (delta rule, GLA, deep memory, Miras) runs bf16 products on tensor
  // cores; Lattice's and Mamba's scans have no products.
  if (device.is_cuda())
    for (const auto& [pass, count] : kernel_pass_counts()) {
      CAPTURE(pass);
      if (pass.rfind("lattice_scan", 0) != 0 && pass.rfind("selective_scan", 0) != 0)
        CHECK(pass.find("bf16 products") != std::string::npos);
    }
  for (const auto& p : mixer->named_parameters()) {
    CAPTURE(p.key());
    REQUIRE(p.value().grad().defined());
    CHECK(p.value().dtype() == torch::kFloat32);
    CHECK(torch::isfinite(p.value().grad()).all().item<bool>());
    CHECK(p.value().grad().abs().max().item<double>() > 0);
  }
  adamw.step();
  const auto params = mixer->parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK_FALSE(torch::equal(before[i], params[i].detach()));

  torch::NoGradGuard no_grad;
  const AutocastScope autocast(device, Precision::bf16);
  LayerState state;
  auto y = mixer->forward(x, &state);
  CHECK(torch::isfinite(y.to(torch::kFloat32)).all().item<bool>());
  if (state.has("memory")) CHECK(state.at("memory").dtype() == torch::kFloat32);
}

// A small language model of `model` (2 layers, d 32) on `device`, fp32 parameters.
LanguageModel small_model(const std::string& model, const torch::Device& device) {
  BenchOptions o;
  o.model = model;
  o.d_model = kD;
  o.n_layers = 2;
  o.n_heads = kHeads;
  o.vocab_size = 64;
  torch::manual_seed(3);
  LanguageModel lm(model_config_from_json(bench_model_config(o)));
  lm->to(device);
  return lm;
}

// Under bf16 autocast the LM head (a matmul) yields bf16 logits; outside, fp32 again.
void check_model_autocast(const std::string& model, const torch::Device& device) {
  auto lm = small_model(model, device);
  auto ids = torch::randint(0, 64, {2, 24}, torch::TensorOptions().dtype(torch::kLong).device(device));
  torch::NoGradGuard no_grad;
  {
    const AutocastScope autocast(device, Precision::bf16);
    auto logits = lm->forward(ids);
    CHECK(logits.dtype() == torch::kBFloat16);
    CHECK(torch::isfinite(logits.to(torch::kFloat32)).all().item<bool>());
  }
  CHECK(lm->forward(ids).dtype() == torch::kFloat32);
}

torch::Device cuda() { return torch::Device(torch::kCUDA, 0); }

}  // namespace

// ---- CPU (every CI run) ----

TEST_CASE("precision: parse, the run config key, AutocastScope engages and restores", "[precision]") {
  CHECK(parse_precision("fp32") == Precision::fp32);
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK_THROWS_WITH(parse_precision("fp16"), Catch::Contains("'fp16'") && Catch::Contains("fp32, bf16"));
  CHECK(resolve_run_config({{"model", "gla"}, {"task", "mqar"}}).at("precision") == "fp32");
  CHECK_THROWS_WITH(resolve_run_config({{"model", "gla"}, {"task", "mqar"}, {"precision", "fp8"}}),
                    Catch::Contains("'precision'") && Catch::Contains("fp8"));
  CHECK_THROWS_WITH(resolve_run_config({{"model", "gla"}, {"task", "mqar"}, {"bf16_autocast", true}}),
                    Catch::Contains("precision=bf16"));
  // The default precision leaves the run's config hash (and so its run folder) unchanged.
  const json base = {{"model", "gla"}, {"task", "mqar"}};
  json explicit_fp32 = base;
  explicit_fp32["precision"] = "fp32";
  CHECK(config_hash(resolve_run_config(base)) == config_hash(resolve_run_config(explicit_fp32)));

  const torch::Device cpu(torch::kCPU);
  CHECK_FALSE(torch_compat::autocast_enabled(c10::DeviceType::CPU));
  auto a = torch::randn({4, 8}), b = torch::randn({8, 4});
  {
    const AutocastScope autocast(cpu, Precision::bf16);
    CHECK(torch_compat::autocast_enabled(c10::DeviceType::CPU));
    CHECK(torch::matmul(a, b).dtype() == torch::kBFloat16);
    const AutocastOff off;  // a recurrence's region: matmuls in their inputs' dtype
    CHECK(torch::matmul(a, b).dtype() == torch::kFloat32);
  }
  CHECK_FALSE(torch_compat::autocast_enabled(c10::DeviceType::CPU));
  CHECK(torch::matmul(a, b).dtype() == torch::kFloat32);
  {
    const AutocastScope autocast(cpu, Precision::fp32);  // fp32: nothing changes
    CHECK(torch::matmul(a, b).dtype() == torch::kFloat32);
  }
  // bf16 on CUDA also lets the recurrences' kernels take bf16 products (autocast's state is thread-local, so this
  // needs no device); bf16 on the CPU does not, and each scope restores what it found.
  CHECK_FALSE(bf16_products_enabled());
  {
    const AutocastScope autocast(cpu, Precision::bf16);
    CHECK_FALSE(bf16_products_enabled());
  }
  {
    const AutocastScope autocast(torch::Device(torch::kCUDA), Precision::bf16);
    CHECK(bf16_products_enabled());
    {
      const Bf16ProductsScope off(false);
      CHECK_FALSE(bf16_products_enabled());
    }
    CHECK(bf16_products_enabled());
  }
  CHECK_FALSE(bf16_products_enabled());
}

TEST_CASE("precision: every mixer takes an AdamW step under bf16 autocast on the CPU, state in fp32", "[precision]") {
  for (const auto& name : Registry::instance().mixer_names()) {
    DYNAMIC_SECTION(name) { check_bf16_step(name, torch::kCPU); }
  }
}

TEST_CASE("precision: models under bf16 autocast on the CPU give bf16 logits, fp32 outside", "[precision]") {
  for (const std::string model : {"transformer", "gated_deltanet"}) {
    DYNAMIC_SECTION(model) { check_model_autocast(model, torch::kCPU); }
  }
}

TEST_CASE("devices: cpu, auto and malformed names, cuda where the machine has none", "[precision]") {
  CHECK(resolve_device("cpu").is_cpu());
  CHECK_THROWS_WITH(resolve_device("gpu"), Catch::Contains("unknown device 'gpu'"));
  CHECK_THROWS_WITH(resolve_device("cuda:x"), Catch::Contains("unknown device 'cuda:x'"));
  if (!torch::cuda::is_available()) {
    CHECK(resolve_device("auto").is_cpu());
    CHECK_THROWS_WITH(resolve_device("cuda:0"), Catch::Contains("CUDA is not available"));
  } else {
    CHECK(resolve_device("auto").is_cuda());
    CHECK_THROWS_WITH(resolve_device("cuda:" + std::to_string(torch::cuda::device_count())),
                      Catch::Contains("CUDA device(s)"));
  }
  // Host batches go to the CPU unchanged.
  auto t = torch::arange(6);
  CHECK(to_device(t, torch::kCPU).equal(t));
}

// ---- CUDA (cuda.* CTest tests; skipped without a device) ----

TEST_CASE("cuda: every mixer takes an AdamW step under bf16 autocast, state in fp32", "[.cuda-train_step]") {
  for (const auto& name : Registry::instance().mixer_names()) {
    DYNAMIC_SECTION(name) { check_bf16_step(name, cuda()); }
  }
}

TEST_CASE("cuda: models under bf16 autocast give bf16 logits, pinned host batches arrive", "[.cuda-precision]") {
  for (const std::string model : {"transformer", "gated_deltanet", "mamba2", "titans_lmm"}) {
    DYNAMIC_SECTION(model) { check_model_autocast(model, cuda()); }
  }
  auto host = torch::arange(1000, torch::kLong);
  auto dev = to_device(host, cuda());
  CHECK(dev.is_cuda());
  CHECK(dev.cpu().equal(host));
  CHECK(built_with_cuda());
}

TEST_CASE("cuda: every kernel op's forms agree in fp32 (T = 128, C = 16 and 64)", "[.cuda-forms]") {
  exact_fp32_math();
  auto& registry = KernelOpRegistry::instance();
  for (const auto& name : registry.names()) {
    const KernelOp& op = registry.at(name);
    if (op.forms.size() < 2 || !op.random_inputs) continue;
    DYNAMIC_SECTION(name) {
      torch::manual_seed(5);
      KernelBenchInputs in = op.random_inputs(2, 128, 2, 16);
      TensorMap inputs;
      for (const auto& [k, t] : in.inputs) inputs[k] = t.to(cuda());
      const TensorMap ref = op.run(inputs, in.params, op.forms[0], 16);
      for (size_t f = 1; f < op.forms.size(); ++f) {
        for (int64_t C : {16, 64}) {
          CAPTURE(op.forms[0], op.forms[f], C);
          const TensorMap out = op.run(inputs, in.params, op.forms[f], C);
          for (const auto& [k, t] : ref) {
            CAPTURE(k);
            REQUIRE(out.count(k));
            REQUIRE(out.at(k).is_cuda());
            CHECK(max_rel_err(out.at(k), t) <= 2e-3);  // docs/models.md#verification: fp32 tolerance
          }
        }
      }
    }
  }
}

TEST_CASE("cuda: prefill + token-by-token decode == full forward (fp64 1e-10, fp32 2e-3)", "[.cuda-decode]") {
  exact_fp32_math();
  for (const auto& name : Registry::instance().mixer_names()) {
    DYNAMIC_SECTION(name) {
      for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
        auto mixer = build_mixer(name, kD, kHeads, contract_args(name), 2);
        mixer->to(cuda(), dtype);
        torch::NoGradGuard no_grad;
        torch::manual_seed(4);
        auto x = torch::randn({kB, kT, kD}, torch::TensorOptions().dtype(dtype)).to(cuda());
        auto full = mixer->forward(x, nullptr);
        for (int64_t prefill : {1, 6, 9}) {
          CAPTURE(dtype, prefill);
          auto stepped = prefill_decode(*mixer, x, prefill);
          CHECK(max_rel_err(stepped, full) <= (dtype == torch::kFloat64 ? 1e-10 : 2e-3));
        }
      }
    }
  }
}

TEST_CASE("cuda: every oracle fixture passes in every form in fp64", "[.cuda-fixtures]") {
  const auto files = list_fixture_files(fixtures_dir());
  REQUIRE_FALSE(files.empty());
  auto& registry = KernelOpRegistry::instance();
  int64_t checked = 0;
  for (const auto& path : files) {
    const Fixture f = load_fixture(path);
    if (!registry.has(f.op)) continue;
    DYNAMIC_SECTION(path) {
      for (const auto& check : check_fixture(f, registry.at(f.op), {16, 64}, "float64", cuda())) {
        CAPTURE(check.label(), check.error);
        CHECK(check.pass());
      }
    }
    ++checked;
  }
  CHECK(checked > 0);
}

TEST_CASE("cuda: every mixer's packed form on the device == each sequence on its own (fp64: outputs, the input's "
          "gradient)",
          "[.cuda-kernels_packed]") {
  // The route reset_state_at_bos takes on a GPU: documents 6, 10 and 1 tokens long, one row, the kernels'
  // cu_seqlens (docs/models.md#packed-sequences).
  const auto seqs = PackedSequences::from_bounds({0, 6, 16, 17}, cuda());
  std::vector<std::string> packing;
  for (const auto& name : Registry::instance().mixer_names()) {
    auto mixer = build_mixer(name, kD, kHeads, contract_args(name), 3);
    mixer->to(cuda(), torch::kFloat64);
    torch::manual_seed(6);
    auto x = torch::randn({1, seqs.total(), kD}, torch::kFloat64).to(cuda()).requires_grad_(true);
    if (!mixer->packs_sequences(x)) continue;
    CAPTURE(name);
    packing.push_back(name);
    auto y = mixer->forward_packed(x, seqs);
    std::vector<torch::Tensor> parts;
    for (int64_t i = 0; i < seqs.count(); ++i)
      parts.push_back(mixer->forward(x.narrow(1, seqs.bounds[size_t(i)], seqs.length(i)), nullptr));
    auto y_ref = torch::cat(parts, 1);
    CHECK(max_rel_err(y.cpu(), y_ref.cpu()) <= 1e-10);
    auto w = torch::randn_like(y);
    auto gx = torch::autograd::grad({(y * w).sum()}, {x})[0];
    auto gx_ref = torch::autograd::grad({(y_ref * w).sum()}, {x})[0];
    CHECK(max_rel_err(gx.cpu(), gx_ref.cpu()) <= 1e-9);
  }
  for (const char* expected :
       {"deltanet", "gated_deltanet", "gated_deltaproduct", "mom", "gla", "hgrn2", "linear_attn", "linear_attn_elu",
        "retnet", "mamba2", "mamba", "mamba3", "transformer", "swa"}) {
    CAPTURE(expected);
    CHECK(std::find(packing.begin(), packing.end(), expected) != packing.end());
  }
}

TEST_CASE("cuda: fused scaled_dot_product_attention == hand-written attention", "[.cuda-attention]") {
  exact_fp32_math();
  torch::manual_seed(6);
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto q = torch::randn({2, 4, 300, 64}, opts).to(cuda()), k = torch::randn({2, 4, 300, 64}, opts).to(cuda()),
       v = torch::randn({2, 4, 300, 64}, opts).to(cuda());
  const auto ref = naive_attention(q, k, v, 0, 0, 0);  // fp64, explicit mask
  CHECK(MNEMO_HAS_SDPA);                                // the GPU's LibTorch has the fused op
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    CAPTURE(dtype);
    auto out = blocked_attention(q.to(dtype), k.to(dtype), v.to(dtype), 0, 0, 0, 256);  // fused path
    CHECK(out.dtype() == dtype);
    CHECK(max_rel_err(out, ref) <= (dtype == torch::kFloat32 ? 1e-4 : 3e-2));
  }
  // Sliding window and offsets take the hand-written blocked path on the GPU too.
  auto windowed = blocked_attention(q.to(torch::kFloat32), k.to(torch::kFloat32), v.to(torch::kFloat32), 0, 0, 64, 128);
  CHECK(max_rel_err(windowed, naive_attention(q, k, v, 0, 0, 64)) <= 1e-5);
}

TEST_CASE("cuda: train (bf16) on a corpus, check-kernel and bench end to end", "[.cuda-cli]") {
  auto dir = test::temp_dir("cuda_cli");
  auto r = test::run_mnemo(
      "train --model gated_deltanet --task lm --device cuda --set precision=bf16 --set size=tiny --set seq_len=128 "
      "--set batch_size=8 --set steps=30 --set eval_every=10 --set val_tokens=4096 "
      "--set corpus=corpus/tinyshakespeare.txt --set tokenizer=byte --set cache_dir=" + (dir / "cache").string() +
      " --db " + (dir / "r.sqlite").string() + " --out " + (dir / "run").string());
  // Three checkpoints: the second and third replace the one before (this crashed once on torch 2.11, see
  // core/file_tree.h).
  INFO(r.output);
  CHECK(r.exit_code == 0);
  auto k = test::run_mnemo("check-kernel " + fixtures_dir() + " --device cuda --skip-unknown");
  INFO(k.output);
  CHECK(k.exit_code == 0);
  CHECK(k.output.find("float64, cuda") != std::string::npos);
  auto b = test::run_mnemo("bench --model transformer --device cuda --precision bf16 --mode fwd,fwdbwd "
                           "--seq-lens 512 --warmup 1 --repeats 3 --no-db");
  INFO(b.output);
  CHECK(b.exit_code == 0);
  CHECK(b.output.find("CUDA events") != std::string::npos);
  auto p = test::run_mnemo("bench --model gated_deltanet --device cuda --precision bf16 --mode fwdbwd --seq-lens 256 "
                           "--warmup 1 --repeats 1 --no-db --profile --profile-trace " + (dir / "trace.json").string());
  INFO(p.output);
  CHECK(p.exit_code == 0);
  CHECK(p.output.find("device kernel time by launching operator") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "trace.json"));
  // Data-parallel on CUDA: a one-rank NCCL job (the one GPU of the machine).
  auto n = test::run_mnemo(
      "train --nproc 1 --model transformer --task mqar --device cuda --set d_model=32 --set n_layers=1 --set steps=4 "
      "--set eval_every=4 --set batch_size=8 --set n_test=16 --db " + (dir / "n.sqlite").string() + " --out " +
      (dir / "nccl").string());
  INFO(n.output);
  CHECK(n.exit_code == 0);
  CHECK(n.output.find("\"dist_backend\":\"nccl\"") != std::string::npos);
}
