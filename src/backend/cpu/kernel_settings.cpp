// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernel_settings.hpp"

#include <string>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/gemm_auto.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {

CpuKernelSettings::CpuKernelSettings(const device::KernelOptions& options, std::string_view device) {
  apply(options, device);
}

void CpuKernelSettings::apply(const device::KernelOptions& options, std::string_view device) {
  const std::string what = std::string(device) + " kernel option gemm_library";
  const GemmLibrary library =
      options.gemm_library.empty() ? gemm_library() : parse_gemm_library(options.gemm_library, what);
  if (options.intra_op_threads < 0 || options.intra_op_threads > kMaxIntraOpThreads) {
    TP_THROW(InvalidArgument, "cpu", device, " kernel option intra_op_threads = ", options.intra_op_threads,
             " must be in [0, ", kMaxIntraOpThreads, "] (0: the intra-op pool as it is)");
  }
  if (options.intra_op_threads > 0) set_intra_op_threads(options.intra_op_threads);
  gemm_library_.store(library, std::memory_order_relaxed);
}

GemmLibrary gemm_library_of(const device::Device& device) noexcept {
  const auto* settings = dynamic_cast<const CpuKernelSettings*>(&device);
  return settings != nullptr ? settings->gemm_library() : GemmLibrary::openblas;
}

std::vector<device::GemmChoice> gemm_choices() {
  std::vector<device::GemmChoice> choices;
  for (const GemmAutoChoice& choice : gemm_auto_choices()) {
    choices.push_back({.m = choice.shape.m,
                       .n = choice.shape.n,
                       .k = choice.shape.k,
                       .transpose_a = choice.shape.transpose_a == Transpose::yes,
                       .transpose_b = choice.shape.transpose_b == Transpose::yes,
                       .library = std::string(name_of(choice.library)),
                       .openblas_gflops = choice.openblas_gflops,
                       .onednn_gflops = choice.onednn_gflops,
                       .source = choice.cached ? "cached" : "measured"});
  }
  return choices;
}

std::vector<device::GemmPathChoice> gemm_path_choices() {
  std::vector<device::GemmPathChoice> choices;
  for (const GemmPathChoice& choice : gemm_auto_path_choices()) {
    choices.push_back(
        {.product = choice.product_class, .path = choice.path, .source = choice.cached ? "cached" : "measured"});
  }
  return choices;
}

}  // namespace tp::backend::cpu
