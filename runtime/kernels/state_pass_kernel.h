// Launchers of the chunk state-pass kernel (state_pass_kernel.cuh, state_pass_kernel.cu): torch-free, raw pointers to
// device memory and a cudaStream_t passed as void*. Compiled into mnemo_cuda_kernels by nvcc; called from
// state_pass_node.cpp on CUDA tensors when the build links the kernels (MNEMO_CUDA_KERNELS).
#pragma once

#include "runtime/kernels/state_pass_kernel.cuh"

namespace mnemo::state_pass_kernel {

// Returns null on success, else the CUDA error's text. The pass is the arguments' type: ForwardArgs runs the forward,
// BackwardArgs the backward.
const char* launch(const ForwardArgs<float>& args, void* stream);
const char* launch(const ForwardArgs<double>& args, void* stream);
const char* launch(const BackwardArgs<float>& args, void* stream);
const char* launch(const BackwardArgs<double>& args, void* stream);

}  // namespace mnemo::state_pass_kernel
