// Kernel op `ttt_linear` in the fixture format (shared/fixtures/kernels/README.md, fla's
// chunk_ttt_linear_ref): q, k, v [B,T,H,D], w, b [H,D] (inner LN affine), eta [B,T,H,1],
// initial_state W [B,H,D,D], initial_state_bias c [B,H,1,D]; params scale, eps, mini_batch_size.
// fla's convention as an instance of ttt.h: C[t, s] = eta_t (row = eta, col = 1), output residual
// õ ("inner"), loss target v - k. Forms: "recurrent" (token-by-token, materialised weights) and
// "dual" (mini-batch dual form). The mini-batch size is part of the math (docs/models.md#ttt), so neither form
// is a "chunk" form swept over chunk sizes: both use params.mini_batch_size.
#include <cmath>

#include "runtime/kernels/op_helpers.h"
#include "runtime/ttt/ttt.h"

namespace mnemo {

namespace {

torch::Tensor input(const TensorMap& in, const std::string& name) {
  return kernel_op_args::required(in, "ttt_linear", name);
}

double number_param(const json& params, const std::string& name, double fallback) {
  if (!params.is_object() || !params.contains(name)) return fallback;
  if (!params.at(name).is_number())
    throw Error("kernel op ttt_linear: params." + name + " must be a number, got " + json_excerpt(params.at(name)));
  return params.at(name).get<double>();
}

TensorMap run_ttt_linear(const TensorMap& in, const json& params, const std::string& form, int64_t) {
  auto q = input(in, "q"), k = input(in, "k"), v = input(in, "v"), eta = input(in, "eta");
  if (q.dim() != 4 || eta.dim() != 4 || eta.size(3) != 1)
    throw Error("kernel op ttt_linear: q must be [B,T,H,D] and eta [B,T,H,1], got " + c10::str(q.sizes()) +
                " and " + c10::str(eta.sizes()));
  const int64_t B = q.size(0), H = q.size(2), D = q.size(3);
  TTTOptions opt;
  opt.scale = kernel_op_args::scale(params, "ttt_linear", D);
  opt.eps = number_param(params, "eps", 1e-6);
  const double mb = number_param(params, "mini_batch_size", 16);
  if (mb < 1 || mb != std::floor(mb))
    throw Error("kernel op ttt_linear: params.mini_batch_size must be a positive integer, got " + std::to_string(mb));
  opt.mini_batch = static_cast<int64_t>(mb);
  opt.output_residual = "inner";
  TTTState st;
  auto W0 = in.count("initial_state") ? in.at("initial_state") : torch::zeros({B, H, D, D}, q.options());
  auto b0 = in.count("initial_state_bias") ? in.at("initial_state_bias") : torch::zeros({B, H, 1, D}, q.options());
  st.anchor.W = {W0};
  st.anchor.b = {b0};
  auto row = eta.squeeze(-1);
  auto col = torch::ones_like(row);
  TTTResult r;
  if (form == "recurrent")
    r = ttt_recurrent(q, k, v, row, col, input(in, "w"), input(in, "b"), st, opt);
  else if (form == "dual")
    r = ttt_chunk(q, k, v, row, col, input(in, "w"), input(in, "b"), st, opt);
  else
    throw Error("kernel op ttt_linear: unknown form '" + form + "' (forms: recurrent, dual)");
  return {{"o", r.o}, {"final_state", r.final.W[0]}, {"final_state_bias", r.final.b[0]}};
}

}  // namespace

void register_ttt_ops(KernelOpRegistry& r) {
  // Bench inputs: inner LN affine w = 1, b = 0, eta ~ U(0, 0.1) (the fixture's range), mini-batch 16.
  r.add({"ttt_linear", {"recurrent", "dual"}, run_ttt_linear, [](int64_t B, int64_t T, int64_t H, int64_t D) {
           namespace kb = kernel_bench;
           return KernelBenchInputs{{{"q", kb::normal({B, T, H, D})}, {"k", kb::normal({B, T, H, D})},
                                     {"v", kb::normal({B, T, H, D})}, {"w", torch::ones({H, D})},
                                     {"b", torch::zeros({H, D})}, {"eta", torch::rand({B, T, H, 1}) * 0.1}},
                                    {{"mini_batch_size", 16}}};
         }});
}

}  // namespace mnemo
