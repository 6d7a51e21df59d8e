// The Mixer contract (runtime/mixer.h), written once and checked for every name in Registry::mixer_names(). Each
// mixer is built from its registered defaults at a tiny size (d_model 16, 2 heads, batch 2, T = 13, fp64) with its
// size knobs made small (small_knobs()), so that chunked code paths, chunk and segment boundaries and attention
// windows all run:
//   causality  perturbing the input at token t changes no output before t (and does change the output from t on);
//   decode     prefill + token-by-token decode through a LayerState equals the stateless full forward;
//   gradients  a scalar of the output gives every parameter a defined, finite gradient that is not all zero;
//   arguments  an unknown argument key and a wrongly typed value are refused with mnemo::Error.
// A failure names the mixer (one DYNAMIC_SECTION per mixer). Per-family tests keep what is particular to a family
// (forms agree, kernels against references and fixtures, parameter layouts, learning).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "runtime/model.h"
#include "runtime/registry.h"
#include "tests/mixer_test_util.h"
#include "tests/test_util.h"

using namespace mnemo;
using mnemo::test::contract_args;
using mnemo::test::knob_words;
using mnemo::test::make_mixer;
using mnemo::test::small_knobs;
using mnemo::test::max_rel_err;
using mnemo::test::prefill_decode;
using mnemo::test::randn_f64;

namespace {

constexpr int64_t kB = 2, kT = 13, kD = 16, kHeads = 2;

std::shared_ptr<Mixer> contract_mixer(const std::string& name, uint64_t seed) {
  return make_mixer(name, kD, kHeads, contract_args(name), seed);
}

// A value of another JSON type than the default's: a string for numbers and booleans, a number for strings.
json wrongly_typed(const json& def) { return def.is_string() ? json(7) : json("seven"); }

}  // namespace

TEST_CASE("mixer contract: every mixer builds at the contract size, with every size knob made small", "[contract]") {
  const auto names = Registry::instance().mixer_names();
  REQUIRE(!names.empty());
  for (const auto& name : names) {
    DYNAMIC_SECTION(name) {
      const auto& defaults = Registry::instance().mixer(name).defaults;
      REQUIRE(defaults.is_object());
      for (auto it = defaults.begin(); it != defaults.end(); ++it) {
        for (const auto& word : knob_words) {
          if (it.key().find(word) == std::string::npos) continue;
          INFO("argument '" << it.key() << "' looks like a size knob: give it a small value in small_knobs()");
          CHECK(small_knobs().contains(it.key()));
        }
      }
      CHECK_NOTHROW(contract_mixer(name, 0));
    }
  }
}

TEST_CASE("mixer contract: causal (perturbing token t changes no output before t)", "[contract]") {
  for (const auto& name : Registry::instance().mixer_names()) {
    DYNAMIC_SECTION(name) {
      auto m = contract_mixer(name, 1);
      torch::NoGradGuard no_grad;
      auto x = randn_f64({kB, kT, kD});
      auto y = m->forward(x, nullptr);
      REQUIRE(y.sizes() == x.sizes());
      REQUIRE(torch::isfinite(y).all().item<bool>());
      // Inside the first chunk, at a chunk start, a chunk end / the last token of a segment, a segment start, the
      // last token.
      for (int64_t t : std::vector<int64_t>{1, 4, 7, 8, kT - 1}) {
        CAPTURE(t);
        auto x2 = x.clone();
        x2.narrow(1, t, 1).add_(randn_f64({kB, 1, kD}));
        auto y2 = m->forward(x2, nullptr);
        // Bit-exact for every mixer today; the bound leaves room for rounding only (e.g. a stabiliser taken over
        // a whole block that a normalisation removes again).
        CHECK(max_rel_err(y2.narrow(1, 0, t), y.narrow(1, 0, t)) <= 1e-12);
        // The perturbation is seen (else the check above would be empty).
        CHECK(max_rel_err(y2.narrow(1, t, kT - t), y.narrow(1, t, kT - t)) > 1e-6);
      }
    }
  }
}

TEST_CASE("mixer contract: prefill + token-by-token decode through a LayerState == full forward (fp64)",
          "[contract]") {
  for (const auto& name : Registry::instance().mixer_names()) {
    DYNAMIC_SECTION(name) {
      auto m = contract_mixer(name, 2);
      torch::NoGradGuard no_grad;
      auto x = randn_f64({kB, kT, kD});
      auto full = m->forward(x, nullptr);
      // Decode from the first token; a prefill ending inside a chunk (and inside the first segment); a prefill
      // across a segment boundary ending inside a chunk. The decode steps then cross chunk and segment boundaries.
      for (int64_t prefill : {1, 6, 9}) {
        CAPTURE(prefill);
        LayerState state;
        auto stepped = prefill_decode(*m, x, prefill, &state);
        REQUIRE(stepped.sizes() == full.sizes());
        CHECK_FALSE(state.tensors.empty());  // the past is carried in the state
        CHECK(max_rel_err(stepped, full) <= 1e-10);
      }
    }
  }
}

TEST_CASE("mixer contract: gradients reach every parameter (defined, finite, not all zero)", "[contract]") {
  for (const auto& name : Registry::instance().mixer_names()) {
    DYNAMIC_SECTION(name) {
      auto m = contract_mixer(name, 3);
      auto x = randn_f64({kB, kT, kD});
      auto w = randn_f64({kB, kT, kD});
      (m->forward(x, nullptr) * w).sum().backward();
      const auto params = m->named_parameters();
      REQUIRE(params.size() > 0);
      for (const auto& p : params) {
        CAPTURE(p.key());
        REQUIRE(p.value().grad().defined());
        CHECK(torch::isfinite(p.value().grad()).all().item<bool>());
        CHECK(p.value().grad().abs().max().item<double>() > 0);
      }
    }
  }
}

// How arguments are resolved: a run's flat config goes through resolve_run_config, which knows every key of the
// model's mixers and refuses unknown keys and values of the wrong JSON type; the model's blocks then hand each mixer
// the keys its defaults declare (BlockImpl), and a value its args struct cannot read becomes a mnemo::Error there
// too (e.g. a config that did not come through resolve_run_config). The factory alone (MixerFamily::make) refuses
// an undeclared key and a value its args struct cannot read with mnemo::Error as well.
TEST_CASE("mixer contract: an unknown argument key and a wrongly typed value are refused with mnemo::Error",
          "[contract]") {
  for (const auto& name : Registry::instance().mixer_names()) {
    DYNAMIC_SECTION(name) {
      const auto& defaults = Registry::instance().mixer(name).defaults;
      json run = {{"model", name}, {"task", "mqar"}};
      run.update(contract_args(name));
      ModelConfig model;
      model.model = name;
      model.vocab_size = 16;
      model.d_model = kD;
      model.n_layers = 1;
      model.n_heads = kHeads;
      model.mixer_args = contract_args(name);
      // The well-formed baselines pass, and every argument is a key of the run's config.
      json resolved;
      REQUIRE_NOTHROW(resolved = resolve_run_config(run));
      REQUIRE_NOTHROW(Block(model, 0));
      for (auto it = defaults.begin(); it != defaults.end(); ++it) CHECK(resolved.contains(it.key()));

      json unknown = run;
      unknown["no_such_mixer_argument"] = 1;
      CHECK_THROWS_AS(resolve_run_config(unknown), Error);
      CHECK_THROWS_WITH(resolve_run_config(unknown), Catch::Contains("no_such_mixer_argument"));
      MixerContext ctx;
      ctx.d_model = kD;
      ctx.n_heads = kHeads;
      ctx.args = defaults;
      ctx.args["no_such_mixer_argument"] = 1;
      CHECK_THROWS_WITH(Registry::instance().mixer(name).make(ctx), Catch::Contains("no_such_mixer_argument"));

      for (auto it = defaults.begin(); it != defaults.end(); ++it) {
        const json bad = wrongly_typed(it.value());
        CAPTURE(it.key(), it.value().dump(), bad.dump());
        json user = run;
        user[it.key()] = bad;
        CHECK_THROWS_AS(resolve_run_config(user), Error);
        CHECK_THROWS_WITH(resolve_run_config(user), Catch::Contains("'" + it.key() + "'"));
        ModelConfig bad_model = model;
        bad_model.mixer_args[it.key()] = bad;
        CHECK_THROWS_AS(Block(bad_model, 0), Error);
        ctx.args = defaults;
        ctx.args[it.key()] = bad;
        CHECK_THROWS_AS(Registry::instance().mixer(name).make(ctx), Error);
      }
    }
  }
}
