// Learnability experiments (docs/tasks.md#learnability): the five target functions, the online memories,
// the result rows, `mnemo run learnability` and its report section.
#include <catch2/catch.hpp>

#include <filesystem>

#include "engine/tools/report_catalog.h"
#include "reports/report.h"
#include "engine/evaluation/learnability.h"
#include "test_util.h"

using namespace mnemo;

namespace {
LearnabilityTargetParams small_target(int setting, int64_t d = 16, int64_t T = 96) {
  LearnabilityTargetParams p;
  p.setting = setting;
  p.d = d;
  p.seq_len = T;
  p.rank = 3;
  p.window = 8;
  return p;
}

// Reference attention: a loop over positions, fp64.
torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t window) {
  const int64_t T = q.size(0);
  auto out = torch::zeros_like(v);
  for (int64_t j = 0; j < T; ++j) {
    const int64_t lo = window > 0 ? std::max<int64_t>(0, j - window + 1) : 0;
    auto s = torch::mv(k.slice(0, lo, j + 1), q[j]) / std::sqrt(static_cast<double>(q.size(1)));
    out[j] = torch::mv(v.slice(0, lo, j + 1).t(), torch::softmax(s, 0));
  }
  return out;
}
}  // namespace

TEST_CASE("Learnability targets: determinism and the shape of each function", "[learnability]") {
  auto s1 = learnability_sequence(small_target(1), 5, torch::kFloat64);
  auto again = learnability_sequence(small_target(1), 5, torch::kFloat64);
  REQUIRE(torch::equal(s1.inputs, again.inputs));
  REQUIRE(torch::equal(s1.targets, again.targets));
  REQUIRE_FALSE(torch::equal(learnability_sequence(small_target(1), 6, torch::kFloat64).inputs, s1.inputs));
  REQUIRE(s1.inputs.sizes() == torch::IntArrayRef({96, 16}));

  // 1: o = W^T i with rank-3 W: the [T, d] target matrix has rank 3.
  auto sv = std::get<1>(torch::svd(s1.targets));
  REQUIRE(sv[2].item<double>() > 1e-3 * sv[0].item<double>());
  REQUIRE(sv[3].item<double>() < 1e-10 * sv[0].item<double>());

  // Every setting of a seed shares the inputs i_j and M*: 2 and 3 see the same inputs, 3 and 4
  // the same targets (4's inputs are the attention outputs o'_j).
  auto s2 = learnability_sequence(small_target(2), 5, torch::kFloat64);
  auto s3 = learnability_sequence(small_target(3), 5, torch::kFloat64);
  auto s4 = learnability_sequence(small_target(4), 5, torch::kFloat64);
  REQUIRE(torch::equal(s2.inputs, s1.inputs));
  REQUIRE(torch::equal(s3.inputs, s1.inputs));
  REQUIRE(torch::equal(s4.targets, s3.targets));
  REQUIRE_FALSE(torch::allclose(s4.inputs, s3.inputs));
  // 2 is a pointwise function: equal inputs give equal targets; 4 too (same M*): o'_0 = v_0.
  // 5: the window changes the targets only after the first `window` positions.
  auto s5 = learnability_sequence(small_target(5), 5, torch::kFloat64);
  REQUIRE(torch::allclose(s5.targets.slice(0, 0, 8), s3.targets.slice(0, 0, 8)));
  REQUIRE_FALSE(torch::allclose(s5.targets.slice(0, 8), s3.targets.slice(0, 8)));
  auto wide = small_target(5);
  wide.window = 96;
  REQUIRE(torch::allclose(learnability_sequence(wide, 5, torch::kFloat64).targets, s3.targets));

  // Unit-variance outputs by construction (setting 1, larger d for a stable estimate).
  auto big = learnability_sequence(small_target(1, 128, 512), 1, torch::kFloat64);
  CHECK(big.targets.pow(2).mean().item<double>() == Approx(1.0).margin(0.35));

  REQUIRE_THROWS_WITH(learnability_sequence(small_target(6), 0), Catch::Contains("setting must be 1..5, got 6"));
  auto bad = small_target(1);
  bad.rank = 17;
  REQUIRE_THROWS_WITH(learnability_sequence(bad, 0), Catch::Contains("rank must be in [1, d = 16], got 17"));
}

TEST_CASE("Learnability attention: causal softmax and sliding window match a loop", "[learnability]") {
  torch::manual_seed(3);
  auto q = torch::randn({700, 8}, torch::kFloat64), k = torch::randn({700, 8}, torch::kFloat64),
       v = torch::randn({700, 8}, torch::kFloat64);  // T > the 512-row block
  for (int64_t w : {0, 1, 5, 600}) {
    auto ref = naive_attention(q, k, v, w);
    REQUIRE(test::max_rel_err(causal_softmax_attention(q, k, v, w), ref) < 1e-12);
  }
  REQUIRE(torch::allclose(causal_softmax_attention(q, k, v, 1), v));  // window 1: own value
}

TEST_CASE("Learnability memories: closed-form gradients, prequential loss, learning", "[learnability]") {
  // The `mlp` memory's closed-form gradients equal autograd's (fp64).
  torch::manual_seed(1);
  auto W1 = (0.3 * torch::randn({6, 24}, torch::kFloat64)).requires_grad_();
  auto W2 = (0.3 * torch::randn({24, 6}, torch::kFloat64)).requires_grad_();
  auto z = torch::randn({6}, torch::kFloat64), o = torch::randn({6}, torch::kFloat64);
  auto y = z + torch::mv(W1, torch::gelu(torch::mv(W2, z)));
  (0.5 * (y - o).pow(2).sum()).backward();
  auto g = deep_mlp_memory_gradients(W1.detach(), W2.detach(), z, o);
  REQUIRE(test::max_rel_err(g.grad_w1, W1.grad()) < 1e-12);
  REQUIRE(test::max_rel_err(g.grad_w2, W2.grad()) < 1e-12);

  // linear (delta rule) on the low-rank map: starts at exactly 1 (M = 0), ends far below.
  LearnabilityConfig c;
  c.target = small_target(1, 32, 1024);
  c.memory = "linear";
  c.seeds = 2;
  c.dtype = torch::kFloat64;
  auto lin = run_learnability(c);
  REQUIRE(lin.config.lr == 0.5);  // the memory's default
  REQUIRE(lin.loss.size() == 2);
  REQUIRE(lin.loss[0][0] == Approx(1.0).epsilon(1e-12));
  CHECK(lin.final_loss < 1e-3);
  REQUIRE(lin.first_below_one >= 0);
  REQUIRE(lin.first_below_one < 200);

  // The paper's learner (AdamW, lr 5e-4) and the deep memory also reduce the loss.
  for (std::string m : {"mlp2", "mlp"}) {
    INFO(m);
    LearnabilityConfig cm;
    cm.target = small_target(1, 16, 800);
    cm.memory = m;
    cm.seeds = 1;
    if (m == "mlp2") cm.lr = 3e-3;
    auto r = run_learnability(cm);
    double head = 0, tail = 0;
    for (int j = 0; j < 50; ++j) head += r.mean_loss[j] / 50;
    for (int j = 750; j < 800; ++j) tail += r.mean_loss[j] / 50;
    CHECK(tail < 0.5 * head);
  }
}

TEST_CASE("Learnability configuration errors name the memory, optimizer or value", "[learnability]") {
  LearnabilityConfig c;
  c.target = small_target(1);
  c.memory = "transformer";
  REQUIRE_THROWS_WITH(resolve(c), Catch::Contains("'transformer' is a model family") &&
                                      Catch::Contains("linear, mlp, mlp2, mlp3, mlp2x4, mlp3x4"));
  c.memory = "foo";
  REQUIRE_THROWS_WITH(resolve(c), Catch::Contains("unknown memory 'foo'"));
  c.memory = "linear";
  c.optimizer = "sgd";
  REQUIRE_THROWS_WITH(resolve(c), Catch::Contains("--optimizer applies to"));
  c.memory = "mlp3x4";
  c.optimizer = "lbfgs";
  REQUIRE_THROWS_WITH(resolve(c), Catch::Contains("unknown optimizer 'lbfgs'"));
  c.optimizer = "rmsprop";
  c.lr = -1;
  REQUIRE_THROWS_WITH(resolve(c), Catch::Contains("lr must be > 0"));
  c.lr = NAN;
  REQUIRE(resolve(c).lr == 5e-4);
}

TEST_CASE("Learnability result rows and smoothing", "[learnability]") {
  auto tm = trailing_mean({4, 2, 0, 2}, 2);
  REQUIRE(tm == std::vector<double>({4, 3, 1, 1}));

  LearnabilityResult r;
  r.config = resolve([] {
    LearnabilityConfig c;
    c.target = small_target(2, 16, 5);
    c.memory = "linear";
    c.seeds = 2;
    return c;
  }());
  r.loss = {{1, 1, 0.5, 0.5, 0.2}, {1, 3, 0.5, 0.5, 0.4}};
  r.mean_loss = {1, 2, 0.5, 0.5, 0.3};
  r.final_loss = 0.86;
  r.first_below_one = 3;
  auto rows = learnability_eval_rows(r, 2);
  REQUIRE(rows.size() == 3 + 2);  // buckets [0,2) [2,4) [4,5) + final + first_below_1
  REQUIRE(rows[0].metric == "normalized_loss");
  REQUIRE(rows[0].value == Approx(1.5));
  REQUIRE(rows[0].n == 4);
  REQUIRE(json::parse(rows[0].details_json)["per_seed"] == json::array({1.0, 2.0}));
  REQUIRE(json::parse(rows[2].setting_json)["bucket_start"] == 4);
  REQUIRE(rows[2].value == Approx(0.3));
  REQUIRE(rows[3].metric == "final_loss");
  REQUIRE(rows[4].metric == "first_below_1");
  REQUIRE(rows[4].value == 3);
  REQUIRE(rows[0].model == "linear");
  REQUIRE(rows[0].task == "learnability");
}

TEST_CASE("mnemo run learnability writes result rows, curves and a report section", "[learnability]") {
  auto dir = test::temp_dir("learnability");
  const std::string db = (dir / "r.sqlite").string();
  auto r = test::run_mnemo("run learnability --setting 1,4 --memory linear,mlp2 --d 8 --seq-len 128 --seeds 1 "
                           "--quiet --db " + db + " --out " + (dir / "curves").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE(std::filesystem::exists(dir / "curves" / "learnability_s4_mlp2.csv"));
  {
    ResultsDB rdb(db);
    auto rows = rdb.evals("learnability");
    REQUIRE(rows.size() == 4 * (2 + 2));  // 4 runs x (2 buckets of 64 + 2 summaries)
  }
  auto bad = test::run_mnemo("run learnability --setting 1 --memory gated_deltanet --db " + db);
  REQUIRE(bad.exit_code != 0);
  REQUIRE(bad.output.find("'gated_deltanet' is a model family") != std::string::npos);
  auto bad_setting = test::run_mnemo("run learnability --setting 7 --memory linear --db " + db);
  REQUIRE(bad_setting.exit_code != 0);

  if (gnuplot_available()) {
    ResultsDB rdb(db);
    auto md_path = write_report(rdb, (dir / "report").string(), report_catalog());
    std::string md = read_text_file(md_path);
    REQUIRE(md.find("## Learnability (Atlas)") != std::string::npos);
    REQUIRE(md.find("mlp2 (adamw, lr 0.0005, d=8)") != std::string::npos);
    REQUIRE(std::filesystem::exists(dir / "report" / "figures" / "learnability_loss_vs_position.png"));
  }
  mnemo::test::remove_dir_tree(dir);
}
