// The Fortran BLAS gemm that LibTorch itself loaded (Debian: OpenBLAS), found in the process by its symbol
// (sgemm_ / dgemm_), for kernels that call one GEMM per small matrix without ATen's per-call dispatch
// (runtime/kernels/chunking.cpp chunk_matmul, runtime/kernels/fused_cpu.cpp gemm). Null where the process has
// no such symbol (e.g. a static MKL): the callers fall back to ATen.
#pragma once
#include <dlfcn.h>

#include <type_traits>

namespace mnemo {

// Column-major C = alpha op(A) op(B) + beta C (BLAS ?gemm_: transa, transb, m, n, k, alpha, A, lda, B, ldb, beta,
// C, ldc).
template <typename T>
using FortranGemm = void (*)(const char*, const char*, const int*, const int*, const int*, const T*, const T*,
                             const int*, const T*, const int*, const T*, T*, const int*);

template <typename T>
FortranGemm<T> fortran_gemm() {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value, "sgemm_ or dgemm_");
  static const FortranGemm<T> fn =
      reinterpret_cast<FortranGemm<T>>(dlsym(RTLD_DEFAULT, std::is_same<T, float>::value ? "sgemm_" : "dgemm_"));
  return fn;
}

}  // namespace mnemo
