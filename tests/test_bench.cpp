// `mnemo bench`: statistics, FLOP count, config resolution, tiny end-to-end measurements.
#include <catch2/catch.hpp>

#include <filesystem>

#include "engine/tools/bench.h"
#include "engine/tools/bench_measure.h"
#include "engine/tools/op_profile.h"
#include "runtime/device.h"
#include "runtime/ops/kernel_ops.h"
#include "test_util.h"

using namespace mnemo;
namespace fs = std::filesystem;

TEST_CASE("bench: median and p20/p80 interpolate order statistics", "[bench]") {
  TimeStats s = time_stats({5, 1, 4, 2, 3});
  CHECK(s.median == Approx(3));
  CHECK(s.p20 == Approx(1.8));
  CHECK(s.p80 == Approx(4.2));
  TimeStats one = time_stats({7});
  CHECK(one.median == 7);
  CHECK(one.p20 == 7);
  CHECK(one.p80 == 7);
}

TEST_CASE("bench: FLOP estimate follows the stated formula", "[bench]") {
  BenchOptions opt;
  opt.model = "transformer";
  opt.d_model = 32;
  opt.n_layers = 2;
  opt.n_heads = 2;
  ModelConfig full = model_config_from_json(bench_model_config(opt));
  const int64_t P = 1000, B = 2, T = 8, d = 32;
  // forward: 2 P B T + per layer 4 d B * sum_{t<T} (t+1) = 4 d B T(T+1)/2
  double fwd = 2.0 * P * B * T + 2 * 4.0 * d * B * (T * (T + 1) / 2);
  CHECK(bench_flops(full, P, "fwd", B, T, 4) == Approx(fwd));
  CHECK(bench_flops(full, P, "fwdbwd", B, T, 4) == Approx(3 * fwd));
  // decode after a T-token prompt: token k attends to T + k + 1 keys.
  double keys = ((T + 1) + (T + 2) + (T + 3) + (T + 4)) / 4.0;
  CHECK(bench_flops(full, P, "decode", B, T, 4) == Approx(B * (2.0 * P + 2 * 4.0 * d * keys)));

  // swa with window 4: keys per query = min(t + 1, 4).
  opt.model = "swa";
  opt.set = {{"window", 4}};
  ModelConfig swa = model_config_from_json(bench_model_config(opt));
  double pairs = 1 + 2 + 3 + 4 + 4 + 4 + 4 + 4;
  CHECK(bench_flops(swa, P, "fwd", 1, T, 4) == Approx(2.0 * P * T + 2 * 4.0 * d * pairs));
}

TEST_CASE("bench: model config resolution rejects unknown models, keys and forms", "[bench]") {
  BenchOptions opt;
  opt.model = "transformer";
  opt.d_model = 48;
  opt.n_heads = 3;
  json cfg = bench_model_config(opt);
  CHECK(cfg["model"] == "transformer");
  CHECK(cfg["d_model"] == 48);
  CHECK(cfg["n_heads"] == 3);
  CHECK(cfg["vocab_size"] == 256);
  CHECK(cfg.contains("rope_theta"));  // the mixer's own defaults are merged

  opt.set = {{"no_such_key", 1}};
  CHECK_THROWS_WITH(bench_model_config(opt), Catch::Contains("unknown --set key 'no_such_key'") &&
                                                 Catch::Contains("rope_theta"));
  opt.set = json::object();
  opt.form = "chunk";
  CHECK_THROWS_WITH(bench_model_config(opt), Catch::Contains("'form' argument"));
  opt.form = "";
  opt.model = "no_such_model";
  CHECK_THROWS_AS(bench_model_config(opt), Error);

  BenchOptions bad;
  bad.model = "transformer";
  bad.modes = {"backward"};
  CHECK_THROWS_WITH(validate(bad), Catch::Contains("'backward'"));
  bad.modes = {"fwd"};
  bad.repeats = 0;
  CHECK_THROWS_AS(validate(bad), Error);
  bad.repeats = 1;
  bad.seq_lens = {16, -2};
  CHECK_THROWS_WITH(validate(bad), Catch::Contains("-2"));
  CHECK_THROWS_AS(resolve_device("tpu"), Error);
}

TEST_CASE("bench: tiny fwd, fwdbwd and decode measurements", "[bench]") {
  BenchOptions opt;
  opt.model = "transformer";
  opt.seq_lens = {16, 64};
  opt.modes = {"fwd", "fwdbwd", "decode"};
  opt.batch = 2;
  opt.d_model = 32;
  opt.n_layers = 2;
  opt.n_heads = 2;
  opt.warmup = 1;
  opt.repeats = 3;
  opt.decode_tokens = 4;
  opt.device = "cpu";
  std::vector<BenchRow> seen;
  auto rows = run_benchmarks(opt, [&](const BenchRow& r) { seen.push_back(r); });
  REQUIRE(rows.size() == 6);
  CHECK(seen.size() == 6);
  for (const BenchRow& r : rows) {
    INFO(r.mode << " T=" << r.seq_len);
    CHECK(r.median_ms > 0);
    CHECK(r.p20_ms <= r.median_ms);
    CHECK(r.median_ms <= r.p80_ms);
    double tokens = r.mode == "decode" ? 2.0 : 2.0 * r.seq_len;
    CHECK(r.tokens_per_s == Approx(tokens / (r.median_ms / 1e3)));
    CHECK(r.gflops > 0);
    CHECK(r.peak_mem_mb >= 0);  // measurable on Linux
    CHECK(r.device == "cpu");
    CHECK(r.dtype == "float32");
    CHECK(r.batch == 2);
    CHECK(r.d_model == 32);
    CHECK(r.repeats == 3);
    CHECK(r.threads >= 1);
    CHECK_FALSE(r.torch_version.empty());
    json c = json::parse(r.config_json);
    CHECK(c["n_params"].get<int64_t>() > 0);
    CHECK(c.contains("flop_formula"));
  }
  // Decode rows: the KV cache after the prompt grows with the prompt length.
  json d16 = json::parse(rows[4].config_json), d64 = json::parse(rows[5].config_json);
  REQUIRE(rows[4].mode == "decode");
  CHECK(d16["state_bytes"].get<int64_t>() > 0);
  CHECK(d64["state_bytes"].get<int64_t>() > d16["state_bytes"].get<int64_t>());
  CHECK(d16["prefill_ms"].get<double>() > 0);
}

TEST_CASE("bench: --doc-len times packed documents (each from a fresh state) and names what it cannot do",
          "[bench][packed]") {
  BenchOptions opt;
  opt.model = "gated_deltanet";
  opt.seq_lens = {64};
  opt.modes = {"fwd", "fwdbwd"};
  opt.batch = 2;
  opt.d_model = 32;
  opt.n_heads = 2;
  opt.warmup = 1;
  opt.repeats = 2;
  opt.device = "cpu";
  opt.doc_len = 16;
  auto rows = run_benchmarks(opt, [](const BenchRow&) {});
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].mode == "fwd_packed");
  CHECK(rows[1].mode == "fwdbwd_packed");
  json c = json::parse(rows[1].config_json);
  CHECK(c["doc_len"] == 16);
  CHECK(c["packed_route"] == "padded groups");  // a CPU model: the tensor chunk forms over length groups
  CHECK(bench_method_text(opt, torch::kCPU).find("mean 16") != std::string::npos);
  opt.modes = {"decode"};
  REQUIRE_THROWS_WITH(validate(opt), Catch::Contains("--doc-len times fwd and fwdbwd"));
  opt.modes = {"fwd"};
  opt.scope = "mixer";
  REQUIRE_THROWS_WITH(validate(opt), Catch::Contains("--doc-len times whole models"));
  opt.scope = "model";
  opt.doc_len = -1;
  REQUIRE_THROWS_WITH(validate(opt), Catch::Contains("--doc-len must be >= 0"));
}

TEST_CASE("bench: mixer scope times the first layer's mixer alone, decode state flat for a recurrent mixer",
          "[bench]") {
  BenchOptions opt;
  opt.model = "gated_deltanet";
  opt.scope = "mixer";
  opt.seq_lens = {16, 64};
  opt.modes = {"fwd", "fwdbwd", "decode"};
  opt.d_model = 32;
  opt.n_heads = 2;
  opt.warmup = 0;
  opt.repeats = 2;
  opt.decode_tokens = 3;
  opt.device = "cpu";
  opt.set = {{"chunk_size", 8}};
  auto rows = run_benchmarks(opt, nullptr);
  REQUIRE(rows.size() == 6);
  CHECK(rows[0].mode == "mixer_fwd");
  CHECK(rows[2].mode == "mixer_fwdbwd");
  CHECK(rows[4].mode == "mixer_decode");
  for (const BenchRow& r : rows) {
    CHECK(r.median_ms > 0);
    json c = json::parse(r.config_json);
    CHECK(c["scope"] == "mixer");
    CHECK(c["mixer"] == "gated_deltanet");
  }
  json d16 = json::parse(rows[4].config_json), d64 = json::parse(rows[5].config_json);
  CHECK(d16["state_bytes"].get<int64_t>() > 0);
  CHECK(d64["state_bytes"].get<int64_t>() == d16["state_bytes"].get<int64_t>());  // O(1) recurrent state
  opt.scope = "layer";
  CHECK_THROWS_WITH(run_benchmarks(opt, nullptr), Catch::Contains("--scope 'layer'"));
}

TEST_CASE("bench: the CLI records rows and names bad input", "[bench]") {
  fs::path dir = test::temp_dir("bench_cli");
  std::string db_path = (dir / "b.sqlite").string();
  auto ok = test::run_mnemo("bench --model transformer --seq-lens 16,32 --d-model 32 --n-heads 2 "
                            "--warmup 0 --repeats 2 --mode fwd,decode --decode-tokens 2 --device cpu --db " +
                            db_path);
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  CHECK(ok.output.find("intra-op threads") != std::string::npos);
  CHECK(ok.output.find("GFLOP/s estimate") != std::string::npos);
  CHECK(ok.output.find("4 rows recorded") != std::string::npos);
  ResultsDB db(db_path);
  auto rows = db.benches();
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].mode == "fwd");
  CHECK(rows[3].mode == "decode");
  CHECK(rows[3].seq_len == 32);

  auto unknown = test::run_mnemo("bench --model no_such_model --seq-lens 16 --no-db");
  CHECK(unknown.exit_code != 0);
  CHECK(unknown.output.find("no_such_model") != std::string::npos);
  auto bad_len = test::run_mnemo("bench --model transformer --seq-lens 16,x --no-db");
  CHECK(bad_len.exit_code != 0);
  CHECK(bad_len.output.find("'x'") != std::string::npos);
}

TEST_CASE("bench: kernel scope times every form of an op on its random inputs", "[bench]") {
  BenchOptions opt;
  opt.kernel = "gated_delta_rule";
  opt.seq_lens = {40};
  opt.modes = {"fwd", "fwdbwd"};
  opt.n_heads = 2;
  opt.head_dim = 8;
  opt.warmup = 0;
  opt.repeats = 1;
  opt.set = {{"chunk_size", 16}};
  auto rows = run_benchmarks(opt, nullptr);
  REQUIRE(rows.size() == 4);  // 2 modes x forms {recurrent, chunk}
  CHECK(rows[0].mode == "kernel_fwd");
  CHECK(rows[0].form == "recurrent");
  CHECK(rows[1].form == "chunk");
  CHECK(rows[3].mode == "kernel_fwdbwd");
  for (const auto& r : rows) {
    CHECK(r.model == "gated_delta_rule");
    CHECK(r.d_model == 16);
    CHECK(r.median_ms > 0);
    json c = json::parse(r.config_json);
    CHECK(c["scope"] == "kernel");
    CHECK(c["chunk_size"] == 16);
  }
  opt.form = "dual";
  CHECK_THROWS_WITH(validate(opt), Catch::Contains("forms: recurrent, chunk"));
  opt.form = "";
  opt.modes = {"decode"};
  CHECK_THROWS_WITH(validate(opt), Catch::Contains("decode"));
  opt.modes = {"fwd"};
  opt.set = {{"window", 3}};
  CHECK_THROWS_WITH(validate(opt), Catch::Contains("window"));
  opt.set = json::object();
  opt.model = "transformer";
  CHECK_THROWS_WITH(validate(opt), Catch::Contains("not both"));
  opt.model = "";
  opt.kernel = "no_such_op";
  CHECK_THROWS_WITH(validate(opt), Catch::Contains("known ops"));
}

// The bench inputs must follow each op's conventions: all forms agree on them (fp64, T not a chunk multiple).
TEST_CASE("bench: every kernel op's random inputs are valid for all its forms", "[bench]") {
  auto& reg = KernelOpRegistry::instance();
  for (const auto& name : reg.names()) {
    const KernelOp& op = reg.at(name);
    REQUIRE(op.random_inputs);
    torch::manual_seed(3);
    KernelBenchInputs in = op.random_inputs(2, 37, 2, 8);
    for (auto& [k, t] : in.inputs) t = t.to(torch::kFloat64);
    auto ref = op.run(in.inputs, in.params, op.forms.front(), 16);
    for (size_t f = 1; f < op.forms.size(); ++f) {
      auto out = op.run(in.inputs, in.params, op.forms[f], 16);
      for (const auto& [k, expected] : ref) {
        INFO(name << " form " << op.forms[f] << " output " << k);
        REQUIRE(out.count(k));
        CHECK(torch::isfinite(expected).all().item<bool>());
        CHECK(torch::allclose(out.at(k), expected, 1e-8, 1e-8));
      }
    }
  }
}

TEST_CASE("bench: --profile attributes host self time to operators", "[bench]") {
  SECTION("the profiler around known work") {
    torch::NoGradGuard no_grad;
    auto a = torch::randn({64, 64});
    OpProfiler profiler(torch::Device(torch::kCPU));
    a = torch::mm(a, a);  // not profiled
    for (int section = 0; section < 2; ++section) {  // two sections add up
      profiler.resume();
      for (int i = 0; i < 7; ++i) a = torch::mm(a, a).tanh();
      profiler.pause();
    }
    OpProfileTables t = profiler.tables();
    auto find = [&](const std::string& name) {
      for (const auto& o : t.host_self)
        if (o.name == name) return o;
      return OpTime{};
    };
    CHECK(find("aten::mm").calls == 14);
    CHECK(find("aten::tanh").calls == 14);
    CHECK(t.device_kernels.empty());
    double sum = 0;
    for (const auto& o : t.host_self) {
      CHECK(o.total_ms >= 0);
      sum += o.total_ms;
    }
    CHECK(sum == Approx(t.host_total_ms));
    std::string text = format_profile(t, 1);
    CHECK(text.find("host self time by operator") != std::string::npos);
    CHECK(text.find("more") != std::string::npos);
  }
  SECTION("the CLI prints the table") {
    auto r = test::run_mnemo("bench --model gated_deltanet --seq-lens 32 --d-model 32 --n-heads 2 --mode fwdbwd "
                             "--warmup 0 --repeats 1 --device cpu --no-db --profile --profile-top 5");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("host self time by operator") != std::string::npos);
    CHECK(r.output.find("aten::") != std::string::npos);
  }
}
