// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cublaslt_library.hpp"

#include <cstdlib>
#include <vector>

#include "backend/cuda/dynamic_library.hpp"

namespace tp::backend::cuda::cublaslt {

namespace {

constexpr const char* kFix =
    "install the CUDA toolkit's cuBLAS (or the nvidia-cublas wheel PyTorch ships) and put its lib folder in "
    "LD_LIBRARY_PATH, or set TP_CUBLASLT_LIBRARY to the full path of libcublasLt.so";

// The soname of the major version the build compiled against: another major may change the ABI.
std::string soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

std::vector<std::string> candidates() {
  const char* configured = std::getenv("TP_CUBLASLT_LIBRARY");  // NOLINT(concurrency-mt-unsafe): read-only use
  if (configured != nullptr && *configured != '\0') return {configured};
  return {soname(), std::string(TP_CUDA_TOOLKIT_LIBRARY_DIR) + "/" + soname()};
}

Library load() {
  const DynamicLibrary opened = DynamicLibrary::open("cuda", "cuBLASLt", candidates(), kFix);
  Library library;
  library.path = opened.path();
  opened.bind("cublasLtCreate", library.Create);
  opened.bind("cublasLtGetStatusName", library.GetStatusName);
  opened.bind("cublasLtGetStatusString", library.GetStatusString);
  opened.bind("cublasLtMatmul", library.Matmul);
  opened.bind("cublasLtMatmulAlgoGetHeuristic", library.MatmulAlgoGetHeuristic);
  opened.bind("cublasLtMatmulDescCreate", library.MatmulDescCreate);
  opened.bind("cublasLtMatmulDescDestroy", library.MatmulDescDestroy);
  opened.bind("cublasLtMatmulDescSetAttribute", library.MatmulDescSetAttribute);
  opened.bind("cublasLtMatmulPreferenceCreate", library.MatmulPreferenceCreate);
  opened.bind("cublasLtMatmulPreferenceDestroy", library.MatmulPreferenceDestroy);
  opened.bind("cublasLtMatmulPreferenceSetAttribute", library.MatmulPreferenceSetAttribute);
  opened.bind("cublasLtMatrixLayoutCreate", library.MatrixLayoutCreate);
  opened.bind("cublasLtMatrixLayoutDestroy", library.MatrixLayoutDestroy);
  return library;
}

}  // namespace

std::string library_names() {
  std::string names;
  for (const std::string& name : candidates()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

const Library& library() { return load_once(library_names(), &load); }

}  // namespace tp::backend::cuda::cublaslt
