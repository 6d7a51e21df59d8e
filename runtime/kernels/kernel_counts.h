// How often each fused kernel pass ran in this process, by where it ran (a CUDA device or the host grid) and the
// precision of its matrix products. A bf16 run on CUDA should show the delta-rule, GLA, deep-memory and Miras passes
// with bf16 products on tensor cores; `mnemo bench` prints the counts after its rows, so a timing says which kernels
// it timed, and the CUDA tests check that a bf16 model step reaches the tensor-core paths.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>

namespace mnemo {

// Products' precision of a pass: its element type, or bf16 operands with fp32 sums (tensor cores on a device).
const char* products_label(torch::ScalarType element, bool bf16_products);

// One pass of `kernel` ("delta_rule forward", ...) on tensors like `like`, its products as products_label names them.
void count_kernel_pass(const std::string& kernel, const torch::Tensor& like, const char* products);

// "kernel (device, products)" -> passes, since the start or the last reset.
std::map<std::string, int64_t> kernel_pass_counts();
void reset_kernel_pass_counts();

// The counts as one line ("delta_rule forward (cuda, bf16 products) ×48, ..."); empty when nothing ran.
std::string describe_kernel_pass_counts();

}  // namespace mnemo
