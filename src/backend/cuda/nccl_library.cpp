// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/nccl_library.hpp"

#include <cstdlib>

#include "backend/cuda/dynamic_library.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda::nccl {

namespace {

constexpr const char* kFix =
    "install NCCL 2 (the nvidia-nccl-cu13 wheel that PyTorch ships, or the libnccl2 package) and put its folder in "
    "LD_LIBRARY_PATH, or set TP_NCCL_LIBRARY to the full path of libnccl.so.2; or choose an all-reduce that needs no "
    "NCCL (--all-reduce ring)";

Library load() {
  const std::string name = library_name();
  const DynamicLibrary opened = DynamicLibrary::open("nccl", "NCCL", {name}, kFix);
  Library library;
  library.path = opened.path();
  opened.bind("ncclGetVersion", library.GetVersion);
  opened.bind("ncclGetErrorString", library.GetErrorString);
  opened.bind("ncclGetUniqueId", library.GetUniqueId);
  opened.bind("ncclCommInitAll", library.CommInitAll);
  opened.bind("ncclCommInitRank", library.CommInitRank);
  opened.bind("ncclGroupStart", library.GroupStart);
  opened.bind("ncclGroupEnd", library.GroupEnd);
  opened.bind("ncclAllReduce", library.AllReduce);
  opened.bind("ncclReduceScatter", library.ReduceScatter);
  opened.bind("ncclAllGather", library.AllGather);
  opened.bind("ncclBroadcast", library.Broadcast);
  opened.bind("ncclReduce", library.Reduce);
  return library;
}

}  // namespace

std::string library_name() {
  const char* configured = std::getenv("TP_NCCL_LIBRARY");  // NOLINT(concurrency-mt-unsafe): read-only use
  return configured != nullptr && *configured != '\0' ? std::string(configured) : std::string("libnccl.so.2");
}

const Library& library() { return load_once(library_name(), &load); }

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
