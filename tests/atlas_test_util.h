// Shared by the Atlas-family kernel tests (test_atlas.cpp, test_atlas_muon.cpp): random fp64 kernel inputs with
// gradients, their slices as OmegaInputs, and one run of a form with the gradients of a random projection of its
// outputs and final state.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "runtime/atlas/omega.h"
#include "runtime/deep_memory/memory.h"
#include "runtime/layers.h"
#include "runtime/model.h"
#include "engine/training/trainer.h"
#include "tests/test_util.h"
#include "file_util.h"

namespace mnemo::test::atlas {

inline const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);

inline DeepMemorySpec spec_of(MemoryKind kind, int64_t d, int64_t d_feat) {
  DeepMemorySpec s;
  s.kind = kind;
  s.d_in = s.d_out = d;
  s.d_feat = d_feat;
  return s;
}

inline MemoryWeights random_weights(const DeepMemorySpec& spec, int64_t B, int64_t H, double scale, bool grad) {
  MemoryWeights w;
  for (const auto& sh : spec.weight_shapes()) {
    auto t = torch::randn({B, H, sh[0], sh[1]}, f64) * scale;
    w.push_back(grad ? t.requires_grad_() : t);
  }
  return w;
}

// φ = taylor_elementwise p = 2 with a = (1, 1/2) (docs/models.md#atlas-family), differentiable in x.
inline torch::Tensor phi2(const torch::Tensor& x) { return torch::cat({x, 0.5 * x * x}, -1); }

struct KIn {
  torch::Tensor q, k, v, la, eta, gamma, lth;
  MemoryWeights w0;
};

inline KIn kernel_inputs(const DeepMemorySpec& spec, int64_t B, int64_t T, int64_t H, bool muon, uint64_t seed) {
  torch::manual_seed(seed);
  KIn in;
  const int64_t d = spec.d_in;
  in.q = l2norm(torch::randn({B, T, H, d}, f64)).detach().requires_grad_();
  in.k = l2norm(torch::randn({B, T, H, d}, f64)).detach().requires_grad_();
  in.v = torch::randn({B, T, H, d}, f64).requires_grad_();
  in.la = torch::log_sigmoid(torch::randn({B, T, H}, f64) + 2.0).detach().requires_grad_();
  in.eta = (0.3 * torch::rand({B, T, H}, f64)).requires_grad_();
  in.gamma = torch::rand({B, T, H}, f64).requires_grad_();
  if (muon) in.lth = torch::log_sigmoid(torch::randn({B, T, H}, f64) + 1.0).detach().requires_grad_();
  in.w0 = random_weights(spec, B, H, 0.4, true);
  return in;
}

inline std::vector<torch::Tensor> leaves(const KIn& in) {
  std::vector<torch::Tensor> out = {in.q, in.k, in.v, in.la, in.eta, in.gamma};
  if (in.lth.defined()) out.push_back(in.lth);
  for (const auto& w : in.w0) out.push_back(w);
  return out;
}

inline OmegaInputs omega_inputs(const KIn& in, bool phi, int64_t a = 0, int64_t n = -1) {
  auto s = [&](const torch::Tensor& x) { return x.defined() ? x.narrow(1, a, n < 0 ? x.size(1) - a : n) : x; };
  OmegaInputs o;
  o.q = s(in.q);
  o.k = s(in.k);
  o.v = s(in.v);
  if (phi) {
    o.qf = phi2(o.q);
    o.kf = phi2(o.k);
  }
  o.log_alpha = s(in.la);
  o.eta = s(in.eta);
  o.gamma = s(in.gamma);
  o.log_theta = s(in.lth);
  return o;
}

struct KRun {
  torch::Tensor y;
  OmegaState state;
  std::vector<torch::Tensor> grads;
};

inline KRun run_kernel(const DeepMemorySpec& spec, const OmegaOptions& opt, const KIn& in, bool phi, bool chunked) {
  OmegaState init;
  init.w = in.w0;
  auto oi = omega_inputs(in, phi);
  auto r = chunked ? omega_chunk(spec, opt, oi, init) : omega_recurrent(spec, opt, oi, init);
  torch::manual_seed(77);
  auto loss = (r.y * torch::randn(r.y.sizes(), f64)).sum();
  for (const auto& w : r.state.w) loss = loss + (w * torch::randn(w.sizes(), f64)).sum();
  for (const auto& s : r.state.s) loss = loss + (s * torch::randn(s.sizes(), f64)).sum();
  return {r.y.detach(), r.state, torch::autograd::grad({loss}, leaves(in))};
}

// A 2-layer fp64 language model of the family `name` (vocabulary 32, d_model 16, 2 heads) with `mixer_args`.
inline LanguageModel tiny_model(const std::string& name, const json& mixer_args) {
  ModelConfig cfg;
  cfg.model = name;
  cfg.vocab_size = 32;
  cfg.d_model = 16;
  cfg.n_layers = 2;
  cfg.n_heads = 2;
  cfg.mixer_args = mixer_args;
  torch::manual_seed(6);
  LanguageModel model(cfg);
  model->to(torch::kFloat64);
  return model;
}

// Tiny MQAR run (V = 64, L = 32, 2 pairs, d = 32, 1 layer, 150 steps; values from V/2 = 32 tokens: chance 1/32)
// with extra model keys; the best test accuracy.
inline double tiny_mqar(const std::string& model, const json& extra = json::object()) {
  auto dir = test::temp_dir("atlas_mqar_" + model);
  json cfg = {{"model", model}, {"task", "mqar"}, {"vocab_size", 64}, {"seq_len", 32}, {"num_kv_pairs", 2},
              {"d_model", 32}, {"n_layers", 1}, {"n_heads", 2}, {"batch_size", 32}, {"n_train", 4000},
              {"n_test", 256}, {"lr", 1e-2}, {"steps", 150}, {"eval_every", 50}, {"chunk_size", 16},
              {"device", "cpu"}};
  cfg.update(extra);
  TrainOptions opt;
  opt.db_path = (dir / "r.sqlite").string();
  opt.out_dir = (dir / "run").string();
  opt.quiet = true;
  auto r = train(cfg, opt);
  WARN(model << " " << extra.dump() << " MQAR best test accuracy " << r.best_test_accuracy << " (final "
             << r.final_test_accuracy << ") after " << r.steps << " steps, " << r.wall_s << " s");
  mnemo::test::remove_dir_tree(dir);
  return r.best_test_accuracy;
}

}  // namespace mnemo::test::atlas
