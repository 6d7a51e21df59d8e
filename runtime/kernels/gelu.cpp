// GELU values in one pass over memory on the CPU (gelu.h gelu_values): the deep-memory chunk nodes take GELU, GELU'
// and GELU'' of every pre-activation of every chunk; as eager ops that was ~13 passes and an erf per call, a
// tenth of a Titans LMM layer's training step.
#include "runtime/kernels/gelu.h"

#include <ATen/record_function.h>

#include "runtime/kernels/fused_cpu.h"
#include "runtime/kernels/fused_cpu_math.h"

namespace mnemo {

namespace {

using fused_cpu::gelu_rows;

MNEMO_SIMD_CLONES void gelu_rows_f(const float* h, float* v, float* g, float* p, float* s, int64_t n) {
  gelu_rows(h, v, g, p, s, n);
}
MNEMO_SIMD_CLONES void gelu_rows_d(const double* h, double* v, double* g, double* p, double* s, int64_t n) {
  gelu_rows(h, v, g, p, s, n);
}

GeluValues gelu_values_eager(const torch::Tensor& h, bool with_second) {
  const double inv_sqrt2 = 0.70710678118654752440, inv_sqrt_2pi = 0.39894228040143267794;
  auto cdf = torch::erf(h * inv_sqrt2).add_(1.0).mul_(0.5);
  auto pdf = (h * h).mul_(-0.5).exp_().mul_(inv_sqrt_2pi);
  GeluValues g{h * cdf, torch::addcmul(cdf, h, pdf), pdf, torch::Tensor()};
  if (with_second) g.second = pdf * (2.0 - h * h);
  return g;
}

}  // namespace

GeluValues gelu_values(const torch::Tensor& h, bool with_second) {
  const bool graph = torch::GradMode::is_enabled() && h.requires_grad();
  if (graph || !fused_cpu_eligible({h})) return gelu_values_eager(h, with_second);
  RECORD_FUNCTION("mnemo::gelu_values", std::vector<c10::IValue>());
  const auto x = h.contiguous();
  GeluValues g{torch::empty_like(x), torch::empty_like(x), torch::empty_like(x),
               with_second ? torch::empty_like(x) : torch::Tensor()};
  const int64_t n = x.numel();
  if (x.scalar_type() == torch::kFloat32)
    gelu_rows_f(x.data_ptr<float>(), g.value.data_ptr<float>(), g.grad.data_ptr<float>(), g.pdf.data_ptr<float>(),
                with_second ? g.second.data_ptr<float>() : nullptr, n);
  else
    gelu_rows_d(x.data_ptr<double>(), g.value.data_ptr<double>(), g.grad.data_ptr<double>(),
                g.pdf.data_ptr<double>(), with_second ? g.second.data_ptr<double>() : nullptr, n);
  return g;
}

}  // namespace mnemo
