// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/nccl_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda::nccl {

namespace {

constexpr const char* kFix =
    "install NCCL 2 (the nvidia-nccl-cu13 wheel that PyTorch ships, or the libnccl2 package) and put its folder in "
    "LD_LIBRARY_PATH, or set TP_NCCL_LIBRARY to the full path of libnccl.so.2; or choose an all-reduce that needs no "
    "NCCL (--all-reduce ring)";

template <typename Function>
void bind(void* handle, const std::string& path, const char* symbol, Function& function) {
  void* address = dlsym(handle, symbol);
  if (address == nullptr) {
    TP_THROW(DeviceError, "nccl", "NCCL (", path, ") has no function ", symbol, ": it is not NCCL 2; ", kFix);
  }
  function = reinterpret_cast<Function>(address);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast): dlsym
}

Library load(const std::string& path) {
  // RTLD_LOCAL: NCCL's symbols stay out of the global namespace; the handle is never closed (the communicators
  // it made live until the process exits).
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    TP_THROW(DeviceError, "nccl", "cannot load NCCL (", path, "): ", why != nullptr ? why : "unknown dlopen error",
             "; ", kFix);
  }
  Library library;
  library.path = path;
  bind(handle, path, "ncclGetVersion", library.GetVersion);
  bind(handle, path, "ncclGetErrorString", library.GetErrorString);
  bind(handle, path, "ncclGetUniqueId", library.GetUniqueId);
  bind(handle, path, "ncclCommInitAll", library.CommInitAll);
  bind(handle, path, "ncclCommInitRank", library.CommInitRank);
  bind(handle, path, "ncclGroupStart", library.GroupStart);
  bind(handle, path, "ncclGroupEnd", library.GroupEnd);
  bind(handle, path, "ncclAllReduce", library.AllReduce);
  bind(handle, path, "ncclReduceScatter", library.ReduceScatter);
  bind(handle, path, "ncclAllGather", library.AllGather);
  bind(handle, path, "ncclBroadcast", library.Broadcast);
  bind(handle, path, "ncclReduce", library.Reduce);
  return library;
}

}  // namespace

std::string library_name() {
  const char* configured = std::getenv("TP_NCCL_LIBRARY");  // NOLINT(concurrency-mt-unsafe): read-only use
  return configured != nullptr && *configured != '\0' ? std::string(configured) : std::string("libnccl.so.2");
}

const Library& library() {
  static std::mutex mutex;
  // By name, so that a changed TP_NCCL_LIBRARY takes effect; leaked on purpose: a loaded NCCL stays loaded (and
  // its functions valid) until the process exits.
  static auto* loaded = new std::map<std::string, Library>();  // NOLINT(cppcoreguidelines-owning-memory)
  const std::string name = library_name();
  const std::scoped_lock lock(mutex);
  auto found = loaded->find(name);
  if (found == loaded->end()) found = loaded->emplace(name, load(name)).first;
  return found->second;
}

void check(const Library& library, Result result, std::string_view call) {
  if (result == kSuccess) return;
  const char* text = library.GetErrorString(result);
  TP_THROW(DeviceError, "nccl", call, " failed: ", text != nullptr ? text : "unknown NCCL error", " (", result, ")");
}

std::string version() {
  int code = 0;
  const Library& loaded = library();
  check(loaded, loaded.GetVersion(&code), "ncclGetVersion");
  // NCCL_VERSION(X, Y, Z): X * 10000 + Y * 100 + Z since 2.9 (X * 1000 + Y * 100 + Z before).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code / 100) % 100 : (code / 100) % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

}  // namespace tp::backend::cuda::nccl
