// Helpers for mixer- and kernel-level tests: build a registered mixer, run it prefill + token by token,
// check a kernel op's fixtures, compare two kernels' outputs and gradients.
#pragma once
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/mixer.h"
#include "runtime/ops/fixture.h"
#include "runtime/ops/kernel_ops.h"
#include "runtime/registry.h"
#include "tests/test_util.h"

namespace mnemo::test {

// The registered mixer `family` with its defaults updated by `args`, as constructed (fp32). With a `seed`,
// torch::manual_seed(seed) first: two mixers built with one seed (and matching parameter shapes) get the same weights.
inline std::shared_ptr<Mixer> build_mixer(const std::string& family, int64_t d_model, int64_t n_heads,
                                          const json& args, std::optional<uint64_t> seed = std::nullopt) {
  const auto& fam = Registry::instance().mixer(family);
  MixerContext ctx;
  ctx.d_model = d_model;
  ctx.n_heads = n_heads;
  ctx.n_layers = 1;
  ctx.args = fam.defaults;
  ctx.args.update(args);
  if (seed) torch::manual_seed(*seed);
  return fam.make(ctx);
}

// build_mixer(...) in float64.
inline std::shared_ptr<Mixer> make_mixer(const std::string& family, int64_t d_model, int64_t n_heads,
                                         const json& args, std::optional<uint64_t> seed = std::nullopt) {
  auto m = build_mixer(family, d_model, n_heads, args, seed);
  m->to(torch::kFloat64);
  return m;
}

// The mixer contract's sizes (tests/test_mixer_contract.cpp, the CUDA and precision tests).
// Small values of the size knobs, applied to every mixer whose defaults declare the key (the defaults are sized
// for real runs: chunks of 16-64 tokens, windows of 2048, segments of 512, mini-batches of 16, which T = 13 would
// never reach).
// The entries of `args` that the mixer `family` declares (a key it does not declare is an error when it is built).
inline json declared_args(const std::string& family, const json& args) {
  json out = json::object();
  for (const auto& [key, value] : args.items())
    if (Registry::instance().mixer(family).defaults.contains(key)) out[key] = value;
  return out;
}

inline const json& small_knobs() {
  static const json knobs = {
      // 3 full chunks and a partial one; titans_lmm / atlas_* / titans_mag / titans_mac prepend 4 persistent
      // tokens (n_persistent default 4), which moves the boundaries by one chunk.
      {"chunk_size", 4},
      {"mini_batch", 4},      // ttt_linear, ttt_mlp: the inner mini-batch is their chunk
      {"gla_sub_chunk", 2},   // gla: secondary chunking inside a chunk
      {"kda_sub_chunk", 2},   // kda: the same for its decayed score matrices
      {"rwkv7_sub_chunk", 2},  // rwkv7: the same for its decayed score matrices
      {"segment_size", 8},    // titans_mac, atlas_mac: two segments (must be a multiple of chunk_size)
      {"window", 5},          // swa, titans_mag, atlas_mag (SWA window); swdt, dot (window c): keys leave it
      {"omega_window", 3},    // dla, swla, omeganet, atlas, atlas_pp, atlas_mag, atlas_mac: Omega-rule window c
      {"q_block", 4},         // softmax attention (transformer, swa, *_mag, *_mac): several query blocks
      {"query_block", 5},     // deep_transformer, swdt: several query blocks
      {"mamba_head_dim", 8},  // mamba2: d_inner = 2 * 16 must be a multiple of the head dim (default 64)
      {"mamba_d_state", 8},   // mamba2, mamba3: default 128
  };
  return knobs;
}

// Names of size knobs: a key of any mixer's defaults that contains one of these must be in small_knobs(), so that a
// new family's chunk or window is not left at a size the contract never crosses.
inline const std::vector<std::string> knob_words = {"chunk", "window", "segment", "block", "batch"};

// The mixer's defaults updated by the small knobs it declares.
inline json contract_args(const std::string& name) {
  const auto& defaults = Registry::instance().mixer(name).defaults;
  json args = json::object();
  for (auto it = small_knobs().begin(); it != small_knobs().end(); ++it)
    if (defaults.contains(it.key())) args[it.key()] = it.value();
  return args;
}

// The first `prefill` tokens in one call with a fresh state, then one token per call, advancing LayerState::pos
// after each call as the model does: to compare with the stateless full forward (decode == forward). The state
// is left in *state_out when given (to inspect what the mixer keeps).
inline torch::Tensor prefill_decode(Mixer& m, const torch::Tensor& x, int64_t prefill,
                                    LayerState* state_out = nullptr) {
  LayerState local;
  LayerState& state = state_out ? *state_out : local;
  std::vector<torch::Tensor> pieces;
  if (prefill > 0) {
    pieces.push_back(m.forward(x.narrow(1, 0, prefill), &state));
    state.pos += prefill;
  }
  for (int64_t t = prefill; t < x.size(1); ++t) {
    pieces.push_back(m.forward(x.narrow(1, t, 1), &state));
    state.pos += 1;
  }
  return torch::cat(pieces, 1);
}

// The layer contract on one configured mixer of width d_model, in fp64 (a mixer variant the contract test's defaults
// do not reach): causal (a change at token 6 of 13 leaves tokens 0..5 and changes token 6), decode equals the full
// forward after prefills of 0 and 5 tokens (`check_state` sees each decode's final state), and every parameter gets
// a finite, non-zero gradient.
inline void require_layer_contract(Mixer& m, int64_t d_model,
                                   const std::function<void(const LayerState&)>& check_state = {}) {
  auto x = randn_f64({2, 13, d_model});
  auto full = m.forward(x, nullptr);
  auto x2 = x.clone();
  x2.select(1, 6).add_(1.0);
  auto changed = m.forward(x2, nullptr);
  CHECK(max_rel_err(changed.narrow(1, 0, 6), full.narrow(1, 0, 6)) <= 1e-14);
  CHECK((changed.select(1, 6) - full.select(1, 6)).abs().max().item<double>() > 1e-6);
  for (int64_t prefill : {0, 5}) {
    CAPTURE(prefill);
    LayerState state;
    auto stepped = prefill_decode(m, x, prefill, &state);
    CHECK(max_rel_err(stepped, full) <= 1e-10);
    if (check_state) check_state(state);
  }
  (full * randn_f64({2, 13, d_model})).sum().backward();
  for (const auto& p : m.named_parameters()) {
    CAPTURE(p.key());
    REQUIRE(p.value().grad().defined());
    CHECK(torch::isfinite(p.value().grad()).all().item<bool>());
    CHECK(p.value().grad().abs().max().item<double>() > 0);
  }
}

// Full forward == prefill(`prefill` tokens, with state) + token-by-token decode of mixer `name` (defaults updated
// by `overrides`, seed 7) in `dtype`; the state must hold "memory" (the linear-recurrent families' state).
// Returns the relative error.
inline double mixer_decode_error(const std::string& name, const json& overrides, torch::ScalarType dtype,
                                 int64_t T = 11, int64_t prefill = 4, int64_t d_model = 32,
                                 int64_t n_heads = 2) {
  auto mixer = build_mixer(name, d_model, n_heads, overrides, 7);
  mixer->to(dtype);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, T, d_model}, torch::TensorOptions().dtype(dtype));
  auto full = mixer->forward(x, nullptr);
  LayerState state;
  auto stepped = prefill_decode(*mixer, x, prefill, &state);
  REQUIRE(stepped.sizes() == full.sizes());
  REQUIRE(state.has("memory"));
  return max_rel_err(stepped, full);
}

// Every fixture file of `op`, every form (chunk sizes 1, 7, 16, 64) must pass the README rule,
// in fp64 (tolerance_hint.float64) and in fp32 (tolerance_hint.float32). Returns the number of
// fixture files checked (the caller requires it to be > 0).
inline int check_op_fixtures(const std::string& op_name) {
  const auto& op = KernelOpRegistry::instance().at(op_name);
  int files = 0;
  for (const auto& path : list_fixture_files(fixtures_dir())) {
    auto fx = load_fixture(path);
    if (fx.op != op_name) continue;
    ++files;
    for (const std::string precision : {"float64", "float32"}) {
      for (const auto& check : check_fixture(fx, op, {1, 7, 16, 64}, precision)) {
        INFO(path << " " << precision << " " << check.label() << " error: " << check.error);
        REQUIRE(check.error.empty());
        for (const auto& o : check.outputs) {
          INFO("output " << o.name << " max_abs_err " << o.max_abs_err << " max_rel_err "
                         << o.max_rel_err << " rtol " << o.rtol << " atol " << o.atol << " "
                         << o.problem);
          CHECK(o.pass);
        }
      }
    }
  }
  return files;
}

// A kernel under test: takes the leaf inputs, returns its outputs (o, final state, ...).
using KernelFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// Runs `reference` and `candidate` on copies of `inputs` (fp64 leaves of size O(1)), compares
// every output (relative error <= out_tol) and the gradients of Σ_i <out_i, w_i> (random w)
// w.r.t. every input (relative error <= grad_tol, docs/models.md#verification). Relative errors are taken against
// max(max |reference|, 1e-6): with O(1) inputs, a reference below 1e-6 is a quantity that
// vanishes mathematically (e.g. dL/dg at T = 1 without a state) and only rounding is left.
inline void require_same_outputs_and_grads(const KernelFn& reference, const KernelFn& candidate,
                                           const std::vector<torch::Tensor>& inputs,
                                           const std::vector<std::string>& input_names,
                                           double out_tol = 1e-10, double grad_tol = 1e-8) {
  constexpr double floor = 1e-6;
  auto leaves = [&] {
    std::vector<torch::Tensor> l;
    for (const auto& t : inputs) l.push_back(t.detach().clone().requires_grad_(true));
    return l;
  };
  auto ref_in = leaves(), cand_in = leaves();
  auto ref_out = reference(ref_in), cand_out = candidate(cand_in);
  REQUIRE(ref_out.size() == cand_out.size());
  torch::Tensor ref_loss = torch::zeros({}, torch::kFloat64), cand_loss = ref_loss.clone();
  for (size_t i = 0; i < ref_out.size(); ++i) {
    INFO("output " << i);
    REQUIRE(ref_out[i].sizes() == cand_out[i].sizes());
    CHECK(max_rel_err(cand_out[i], ref_out[i], floor) <= out_tol);
    auto w = torch::randn_like(ref_out[i]);
    ref_loss = ref_loss + (ref_out[i] * w).sum();
    cand_loss = cand_loss + (cand_out[i] * w).sum();
  }
  auto ref_grads = torch::autograd::grad({ref_loss}, ref_in, {}, false, false, /*allow_unused=*/true);
  auto cand_grads = torch::autograd::grad({cand_loss}, cand_in, {}, false, false, true);
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient w.r.t. " << (i < input_names.size() ? input_names[i] : std::to_string(i)));
    REQUIRE(ref_grads[i].defined());
    REQUIRE(cand_grads[i].defined());
    CHECK(max_rel_err(cand_grads[i], ref_grads[i], floor) <= grad_tol);
  }
}

// fp32 run of `fn` against the fp64 reference `ref`: outputs and gradients of Σ <out, w>, relative to max |ref|
// (the inputs as fp32 leaves; names label the gradients, the last one repeated past the end).
inline void require_fp32_close(const KernelFn& ref, const KernelFn& fn, const std::vector<torch::Tensor>& inputs,
                               const std::vector<std::string>& input_names, double tol) {
  std::vector<torch::Tensor> ref_in, f32_in;
  for (const auto& t : inputs) {
    ref_in.push_back(t.detach().clone().requires_grad_(true));
    f32_in.push_back(t.detach().to(torch::kFloat32).requires_grad_(true));
  }
  auto ref_out = ref(ref_in), out = fn(f32_in);
  torch::Tensor ref_loss = torch::zeros({}, torch::kFloat64), loss = torch::zeros({}, torch::kFloat32);
  for (size_t i = 0; i < ref_out.size(); ++i) {
    INFO("output " << i);
    CHECK(out[i].scalar_type() == torch::kFloat32);
    CHECK(max_rel_err(out[i].to(torch::kFloat64), ref_out[i], 1e-6) <= tol);
    auto w = torch::randn_like(ref_out[i]);
    ref_loss = ref_loss + (ref_out[i] * w).sum();
    loss = loss + (out[i] * w.to(torch::kFloat32)).sum();
  }
  auto ref_grads = torch::autograd::grad({ref_loss}, ref_in);
  auto grads = torch::autograd::grad({loss}, f32_in);
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient w.r.t. " << input_names[std::min<size_t>(i, input_names.size() - 1)]);
    CHECK(max_rel_err(grads[i].to(torch::kFloat64), ref_grads[i], 1e-6) <= tol);
  }
}

// The mixer `family` (d_model 64, `heads` heads, fp64) on `device` with its chunk form (`chunk_args`) against its
// recurrent form with the same weights: outputs within 1e-10, the input's gradient within 1e-9 (B 2, T 45).
inline void require_chunk_equals_recurrent_on(const torch::Device& device, const std::string& family, int64_t heads,
                                              const json& chunk_args) {
  auto chunked = make_mixer(family, 64, heads, chunk_args, 31);
  auto recurrent = make_mixer(family, 64, heads, {{"form", "recurrent"}}, 31);
  chunked->to(device);
  recurrent->to(device);
  auto x = randn_f64({2, 45, 64}).to(device).requires_grad_(true);
  auto y = chunked->forward(x, nullptr);
  auto y_ref = recurrent->forward(x, nullptr);
  CHECK(max_rel_err(y.cpu(), y_ref.cpu()) < 1e-10);
  auto w = torch::randn_like(y);
  auto gx = torch::autograd::grad({(y * w).sum()}, {x})[0];
  auto gx_ref = torch::autograd::grad({(y_ref * w).sum()}, {x})[0];
  CHECK(max_rel_err(gx.cpu(), gx_ref.cpu()) < 1e-9);
}

}  // namespace mnemo::test
