// SPDX-License-Identifier: Apache-2.0
#pragma once
// What KernelOptions::gemm_library "auto" chose: for one class of float32 GEMM shapes (sizes rounded up to
// powers of two, and the two transposes), the library a short single-threaded timing of both found faster on
// this machine at the class's first product, kept for the rest of the process (Device::gemm_choices). The
// timing runs once per machine: its choice is saved in a per-machine cache file, which later processes
// choose from without timing (source "cached"), so they compute the same bits.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tp::device {

// The float32 GEMM libraries by name: the values of KernelOptions::gemm_library, `--gemm` and TP_GEMM, "auto"
// first (the default). The CPU backend maps each to its library (tested against this list).
inline constexpr std::array<std::string_view, 3> kGemmLibraryNames{"auto", "openblas", "onednn"};

struct GemmChoice {
  // The product timed, the class's first: C (m x n) = op(A) (m x k) op(B) (k x n).
  std::int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  std::string library;  // "openblas" or "onednn"
  // The rates each library reached on it, one thread (a large product timed on its leading block).
  double openblas_gflops = 0, onednn_gflops = 0;
  // "measured": timed by this process; "cached": read from the machine's cache file, where the process that
  // timed it saved it (the shape and rates above are that process's).
  std::string source;
};

// How one product of a mixed_bfloat16 model is computed (Device::gemm_path_choices): of the bfloat16 GEMM's
// paths, the fastest on this machine at the product's first use, kept in the same cache file ("native":
// oneDNN's bfloat16 kernels; "padded": the same at an AMX tile's depth; "widened": the float32 GEMM on
// operands widened to float32).
struct GemmPathChoice {
  std::string product;  // e.g. "bfloat16 784x512x16 A^T (float32 via auto)"
  std::string path;
  std::string source;  // "measured" or "cached", as GemmChoice's
};

}  // namespace tp::device
