// Oracle fixtures (the shared fixtures directory, and tests/data/kernels made by scripts/make_fla_fixtures.py from
// flash-linear-attention's own reference functions): every registered kernel op × every fixture file of that op ×
// every form (chunked forms at several chunk sizes, some not dividing T) must match the reference outputs by the
// README rule in fp64. Plus the loader's and comparator's contracts.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>

#include "runtime/ops/fixture.h"
#include "tests/test_util.h"
#include "file_util.h"

using namespace mnemo;

TEST_CASE("kernel fixtures: every registered op passes every fixture file in every form", "[fixtures]") {
  auto& registry = KernelOpRegistry::instance();
  auto files = list_fixture_files(fixtures_dir());
  REQUIRE(!files.empty());
  const auto made_here = list_fixture_files(std::string(MNEMO_SOURCE_DIR) + "/tests/data/kernels");
  REQUIRE(!made_here.empty());
  files.insert(files.end(), made_here.begin(), made_here.end());
  std::set<std::string> checked_ops, unregistered_ops;
  for (const auto& file : files) {
    Fixture f = load_fixture(file);
    if (!registry.has(f.op)) {  // a family whose kernels are not written yet
      unregistered_ops.insert(f.op);
      continue;
    }
    checked_ops.insert(f.op);
    for (const auto& check : check_fixture(f, registry.at(f.op), {7, 16, 64})) {
      std::string detail;
      for (const auto& o : check.outputs)
        detail += o.name + ": max_abs " + std::to_string(o.max_abs_err) + " max_rel " +
                  std::to_string(o.max_rel_err) + (o.pass ? " ok" : " FAIL " + o.problem) + "; ";
      CAPTURE(file, check.label(), check.error, detail);
      CHECK(check.pass());
    }
  }
  std::string skipped;
  for (const auto& op : unregistered_ops) skipped += op + " ";
  if (!skipped.empty()) WARN("fixtures skipped, op not registered: " << skipped);
  CHECK(checked_ops.count("delta_rule") == 1);
  CHECK(checked_ops.count("gated_delta_rule") == 1);
  CHECK(checked_ops.count("kda") == 1);
  CHECK(checked_ops.count("gated_delta_product") == 1);
  CHECK(checked_ops.count("forgetting_attn") == 1);
  CHECK(checked_ops.count("mamba3_siso") == 1);
  CHECK(checked_ops.count("mamba3_mimo") == 1);
  CHECK(checked_ops.count("rwkv7") == 1);
  CHECK(checked_ops.count("path_attn") == 1);
  CHECK(checked_ops.count("mesa_net") == 1);
  CHECK(checked_ops.count("log_linear_attn") == 1);
  CHECK(checked_ops.count("log_linear_gdn") == 1);
  // Every registered op must have fixtures to be checked against.
  for (const auto& op : registry.names()) {
    CAPTURE(op);
    CHECK(checked_ops.count(op) == 1);
  }
}

namespace {

json tensor_json(std::vector<int64_t> shape, std::vector<double> data) {
  return {{"shape", shape}, {"dtype", "float64"}, {"data", data}};
}

// A minimal valid fixture of the gated_delta_rule op (B = T = H = 1, K = V = 2).
json minimal_fixture() {
  json tol = {{"float64", {{"rtol", 1e-9}, {"atol", 1e-12}}}, {"float32", {{"rtol", 1e-3}, {"atol", 1e-5}}}};
  // One token from a zero state: u = β v, S = kᵀ u, o = scale (q·k) u.
  const double beta = 0.5, scale = 0.5;
  const std::vector<double> q = {1, 0}, k = {0.6, 0.8}, v = {2, -4};
  std::vector<double> o, S;
  for (double vv : v) o.push_back(scale * (q[0] * k[0] + q[1] * k[1]) * beta * vv);
  for (double kk : k)
    for (double vv : v) S.push_back(kk * beta * vv);
  return {{"op", "gated_delta_rule"},
          {"case", "hand"},
          {"params", {{"scale", scale}}},
          {"inputs",
           {{"q", tensor_json({1, 1, 1, 2}, q)},
            {"k", tensor_json({1, 1, 1, 2}, k)},
            {"v", tensor_json({1, 1, 1, 2}, v)},
            {"beta", tensor_json({1, 1, 1}, {beta})},
            {"g", tensor_json({1, 1, 1}, {-0.3})}}},
          {"outputs", {{"o", tensor_json({1, 1, 1, 2}, o)}, {"final_state", tensor_json({1, 1, 2, 2}, S)}}},
          {"tolerance_hint", {{"o", tol}, {"final_state", tol}}}};
}

std::string write_json(const std::filesystem::path& dir, const std::string& name, const json& j) {
  auto path = (dir / name).string();
  std::ofstream(path) << j.dump();
  return path;
}

}  // namespace

TEST_CASE("kernel fixtures: any fixture in the format works, malformed files name file and field",
          "[fixtures]") {
  auto dir = mnemo::test::temp_dir("fixtures");
  auto& op = KernelOpRegistry::instance().at("gated_delta_rule");

  auto good = load_fixture(write_json(dir, "good.json", minimal_fixture()));
  for (const auto& check : check_fixture(good, op, {1, 4})) {
    CAPTURE(check.label(), check.error);
    CHECK(check.pass());
  }
  json wrong = minimal_fixture();
  wrong["outputs"]["o"]["data"][0] = 1.0;  // the hand-computed value is 0.5 · 0.6 · 1 = 0.3
  for (const auto& check : check_fixture(load_fixture(write_json(dir, "wrong.json", wrong)), op, {4})) {
    CHECK_FALSE(check.pass());
    CHECK(check.outputs.at(0).name == "final_state");  // TensorMap is ordered by name
    CHECK(check.outputs.at(1).max_abs_err == Approx(0.7));
  }

  auto expect_error = [&](const std::string& name, json j, const std::string& field) {
    auto path = write_json(dir, name, j);
    CAPTURE(name, field);
    CHECK_THROWS_WITH(load_fixture(path), Catch::Contains(path) && Catch::Contains(field));
  };
  json j = minimal_fixture();
  j.erase("op");
  expect_error("no_op.json", j, "'op'");
  j = minimal_fixture();
  j["inputs"]["v"]["data"] = {1.0};
  expect_error("short_data.json", j, "inputs.v.data");
  j = minimal_fixture();
  j["inputs"]["k"]["shape"] = {1, -1};
  expect_error("bad_shape.json", j, "inputs.k.shape");
  j = minimal_fixture();
  j["inputs"]["q"]["data"][1] = "x";
  expect_error("not_number.json", j, "inputs.q.data[1]");
  j = minimal_fixture();
  j["tolerance_hint"].erase("final_state");
  expect_error("no_tolerance.json", j, "tolerance_hint.final_state");
  j = minimal_fixture();
  j["tolerance_hint"]["o"]["float64"].erase("atol");
  expect_error("no_atol.json", j, "tolerance_hint.o.float64.atol");
  std::ofstream(dir / "broken.json") << "{\"op\": ";
  CHECK_THROWS_AS(load_fixture((dir / "broken.json").string()), Error);

  // A missing required input is reported by the op, not crashed on.
  j = minimal_fixture();
  j["inputs"].erase("beta");
  auto checks = check_fixture(load_fixture(write_json(dir, "no_beta.json", j)), op, {4});
  CHECK_THAT(checks.at(0).error, Catch::Contains("'beta' is missing"));
  mnemo::test::remove_dir_tree(dir);
}

TEST_CASE("kernel op registry: lookup of an unknown op lists the known ops", "[fixtures]") {
  auto& registry = KernelOpRegistry::instance();
  CHECK(registry.has("delta_rule"));
  CHECK_THROWS_WITH(registry.at("no_such_op"),
                    Catch::Contains("no_such_op") && Catch::Contains("delta_rule") &&
                        Catch::Contains("gated_delta_rule"));
  CHECK_THROWS_AS(registry.add({"delta_rule", {"recurrent"}, registry.at("delta_rule").run}), Error);
}

TEST_CASE("compare_output: README rule |a - e| <= atol + rtol |e|, errors reported", "[fixtures]") {
  auto e = torch::tensor({1.0, -2.0, 0.0}, torch::kFloat64);
  auto ok = compare_output("o", e + torch::tensor({1e-9, -1e-9, 5e-11}, torch::kFloat64), e, 1e-9, 1e-10);
  CHECK(ok.pass);
  CHECK(ok.max_abs_err == Approx(1e-9));
  CHECK(ok.max_rel_err == Approx(0.5e-9));  // max |a - e| / max |e|
  auto bad = compare_output("o", e + torch::tensor({0.0, 0.0, 2e-10}, torch::kFloat64), e, 1e-9, 1e-10);
  CHECK_FALSE(bad.pass);
  CHECK(compare_output("o", torch::zeros({2}, torch::kFloat64), e, 1, 1).problem.find("shape") !=
        std::string::npos);
  auto nan = compare_output("o", torch::full({3}, NAN, torch::kFloat64), e, 1, 1);
  CHECK_FALSE(nan.pass);
  CHECK(nan.problem == "non-finite values");
}
