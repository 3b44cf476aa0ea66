// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cublaslt_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda::cublaslt {

namespace {

constexpr const char* kFix =
    "install the CUDA toolkit's cuBLAS (or the nvidia-cublas wheel PyTorch ships) and put its lib folder in "
    "LD_LIBRARY_PATH, or set TP_CUBLASLT_LIBRARY to the full path of libcublasLt.so";

// The soname of the major version the build compiled against: a later major may change the ABI.
std::string soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

std::vector<std::string> candidates() {
  const char* configured = std::getenv("TP_CUBLASLT_LIBRARY");  // NOLINT(concurrency-mt-unsafe): read-only use
  if (configured != nullptr && *configured != '\0') return {configured};
  return {soname(), std::string(TP_CUDA_TOOLKIT_LIBRARY_DIR) + "/" + soname()};
}

template <typename Function>
void bind(void* handle, const std::string& path, const char* symbol, Function& function) {
  void* address = dlsym(handle, symbol);
  if (address == nullptr) {
    TP_THROW(DeviceError, "cuda", "cuBLASLt (", path, ") has no function ", symbol, ": it is not cuBLASLt ",
             CUBLAS_VER_MAJOR, "; ", kFix);
  }
  function = reinterpret_cast<Function>(address);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast): dlsym
}

Library load() {
  std::string tried;
  std::string why;
  for (const std::string& name : candidates()) {
    // RTLD_LOCAL: cuBLASLt's symbols stay out of the global namespace; the handle is never closed (the handles
    // and plans made through it live until the process exits).
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      tried += (tried.empty() ? "" : ", ") + name;
      why = error != nullptr ? error : "unknown dlopen error";
      continue;
    }
    Library library;
    library.path = name;
    bind(handle, name, "cublasLtCreate", library.Create);
    bind(handle, name, "cublasLtGetStatusName", library.GetStatusName);
    bind(handle, name, "cublasLtGetStatusString", library.GetStatusString);
    bind(handle, name, "cublasLtMatmul", library.Matmul);
    bind(handle, name, "cublasLtMatmulAlgoGetHeuristic", library.MatmulAlgoGetHeuristic);
    bind(handle, name, "cublasLtMatmulDescCreate", library.MatmulDescCreate);
    bind(handle, name, "cublasLtMatmulDescDestroy", library.MatmulDescDestroy);
    bind(handle, name, "cublasLtMatmulDescSetAttribute", library.MatmulDescSetAttribute);
    bind(handle, name, "cublasLtMatmulPreferenceCreate", library.MatmulPreferenceCreate);
    bind(handle, name, "cublasLtMatmulPreferenceDestroy", library.MatmulPreferenceDestroy);
    bind(handle, name, "cublasLtMatmulPreferenceSetAttribute", library.MatmulPreferenceSetAttribute);
    bind(handle, name, "cublasLtMatrixLayoutCreate", library.MatrixLayoutCreate);
    bind(handle, name, "cublasLtMatrixLayoutDestroy", library.MatrixLayoutDestroy);
    return library;
  }
  TP_THROW(DeviceError, "cuda", "cannot load cuBLASLt (tried ", tried, "): ", why, "; ", kFix);
}

}  // namespace

std::string library_names() {
  std::string names;
  for (const std::string& name : candidates()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

const Library& library() {
  static std::mutex mutex;
  // By the names tried, so that a changed TP_CUBLASLT_LIBRARY takes effect; leaked on purpose: a loaded
  // cuBLASLt stays loaded (and its functions valid) until the process exits, past the destructors of the
  // devices that still call it.
  static auto* loaded = new std::map<std::string, Library>();  // NOLINT(cppcoreguidelines-owning-memory)
  const std::string names = library_names();
  const std::scoped_lock lock(mutex);
  auto found = loaded->find(names);
  if (found == loaded->end()) found = loaded->emplace(names, load()).first;
  return found->second;
}

}  // namespace tp::backend::cuda::cublaslt
