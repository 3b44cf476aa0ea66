// SPDX-License-Identifier: Apache-2.0
#pragma once
// GemmLibrary::automatic: which float32 GEMM library computes a product is chosen per shape class by timing
// both at the class's first product, and the winner is kept for the rest of the process. Which library is
// faster depends on the CPU (oneDNN's AVX-512 kernels against OpenBLAS's), so no fixed default is right on
// every machine; measuring on the machine is.
//
// A choice also persists per machine (gemm_auto_cache.hpp): a class this machine measured in an earlier
// process takes that choice from the file instead of timing again, so runs of the same command choose, and
// compute, the same.
//
// The table of choices is process-wide (every cpu and sim device shares it) and only grows: a class once
// chosen keeps its library, so a product's bits depend only on its shape and on the choice for its class.
// One measurement runs at a time in the process: a thread meeting a class being measured waits for that
// result, and a thread meeting a new class while another is measured waits its turn, because two timings
// running at once on a small machine disturb each other.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/kernels/gemm.hpp"

namespace tp::backend::cpu {

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  Transpose transpose_a = Transpose::no, transpose_b = Transpose::no;
};

// The library chosen for one shape class, and the rates that chose it.
struct GemmAutoChoice {
  GemmShape shape;  // the product timed: the class's first (a large one was timed on its leading block)
  GemmLibrary library = GemmLibrary::openblas;  // openblas or onednn
  double openblas_gflops = 0, onednn_gflops = 0;
  bool cached = false;  // taken from the machine's cache file (shape and rates as the measuring process had them)
};

// Computes the leading m x n x k block of the caller's product (same operands and leading dimensions, so
// any m, n, k up to the product's) with `library` on the calling thread alone, into `c` (m x n, contiguous,
// beta = 0).
using GemmProbe = std::function<void(GemmLibrary library, std::int64_t m, std::int64_t n, std::int64_t k, float* c)>;

// The library for `shape`'s class: the process's choice, else the machine's cache file's, else, at the
// class's first product, the one `probe` times faster (then kept, and written to the file). Never writes the caller's C: the timed products go to a scratch buffer.
// Thread-safe. `shape` has m, n, k >= 1.
[[nodiscard]] GemmLibrary auto_gemm_library(const GemmShape& shape, const GemmProbe& probe);

// A choice among named ways to compute one product (the bfloat16 GEMM's paths, half_nn.cpp), kept as the
// library choices are: the process's choice for `product_class`, else the machine's cache file's when it is
// one of `candidates`, else, at the class's first product, the name `measure` returns (it times the
// candidates), then kept and written to the file. One thread measures a class; others meeting it meanwhile
// wait for its result. `measure` runs without any lock of the table held (it may itself choose float32
// libraries); if it throws, the class is measured again at its next product. Thread-safe.
[[nodiscard]] std::string auto_gemm_path(const std::string& product_class, const std::vector<std::string>& candidates,
                                         const std::function<std::string()>& measure);

// One auto_gemm_path choice: the product's class, the path's name, and whether it came from the cache file.
struct GemmPathChoice {
  std::string product_class;
  std::string path;
  bool cached = false;
};

// Every path choice made so far in the process, in the order they were made.
[[nodiscard]] std::vector<GemmPathChoice> gemm_auto_path_choices();

// Every choice made so far in the process, in the order they were made.
[[nodiscard]] std::vector<GemmAutoChoice> gemm_auto_choices();

// How many measurements the process has run (one per shape class): a cached choice adds none.
[[nodiscard]] std::int64_t gemm_auto_measurements() noexcept;

// Forgets every choice (library and path) and the cache file as read, as a new process starts: the next product reads the
// environment and the file again. For tests that play a later process; no product may be running.
void reset_gemm_auto_choices();

// How many times reset_gemm_auto_choices() has run: a table of choices kept beside this one (half_nn.cpp's
// fast lookup of the path choices) forgets its entries when it changes.
[[nodiscard]] std::uint64_t gemm_auto_generation() noexcept;

}  // namespace tp::backend::cpu
