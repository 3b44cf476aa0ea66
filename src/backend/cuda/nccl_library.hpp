// SPDX-License-Identifier: Apache-2.0
#pragma once
// NCCL, loaded at run time: the library links no libnccl, so tensorpool's binaries load and run where NCCL is
// missing; only a collective that asks for NCCL loads it (dlopen of TP_NCCL_LIBRARY when set, else
// "libnccl.so.2" through the loader's search path, which on a GPU machine may be PyTorch's wheel folder named
// in LD_LIBRARY_PATH). A library that cannot be loaded, or lacks a function, is a tp::DeviceError naming it and
// the fix.
//
// The declarations below are NCCL's stable C ABI (nccl.h of NCCL 2.x: the opaque communicator, the 128-byte
// unique id, the enum values), written out here so that building needs no nccl.h either.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace tp::backend::cuda::nccl {

struct Comm;  // NCCL's struct ncclComm
using Comm_t = Comm*;
struct UniqueId {
  char internal[128];
};
using Result = int;                    // ncclResult_t: 0 is ncclSuccess
inline constexpr Result kSuccess = 0;  // ncclSuccess
inline constexpr int kSum = 0;         // ncclSum
// ncclDataType_t values.
inline constexpr int kFloat16 = 6;
inline constexpr int kFloat32 = 7;
inline constexpr int kFloat64 = 8;
inline constexpr int kBfloat16 = 9;

// The functions tensorpool calls, looked up once in the loaded library.
struct Library {
  std::string path;  // what was passed to dlopen
  Result (*GetVersion)(int*);
  const char* (*GetErrorString)(Result);
  Result (*GetUniqueId)(UniqueId*);
  Result (*CommInitAll)(Comm_t*, int, const int*);
  Result (*CommInitRank)(Comm_t*, int, UniqueId, int);
  Result (*GroupStart)();
  Result (*GroupEnd)();
  Result (*AllReduce)(const void*, void*, std::size_t, int, int, Comm_t, cudaStream_t);
  Result (*ReduceScatter)(const void*, void*, std::size_t, int, int, Comm_t, cudaStream_t);
  Result (*AllGather)(const void*, void*, std::size_t, int, Comm_t, cudaStream_t);
  Result (*Broadcast)(const void*, void*, std::size_t, int, int, Comm_t, cudaStream_t);
  Result (*Reduce)(const void*, void*, std::size_t, int, int, int, Comm_t, cudaStream_t);
};

// The name dlopen is given: TP_NCCL_LIBRARY when set (and not empty), else "libnccl.so.2".
[[nodiscard]] std::string library_name();

// NCCL as library_name() names it now, loaded on the first call for that name that succeeds (later calls
// return it; a failed load is retried, so a fixed TP_NCCL_LIBRARY takes effect). tp::DeviceError "cannot load NCCL (<name>): <dlerror>" with the fix, or naming
// a function the library lacks.
const Library& library();

// Throws tp::DeviceError "<call> failed: <ncclGetErrorString> (<code>)" unless `result` is ncclSuccess.
void check(const Library& library, Result result, std::string_view call);

// "major.minor.patch" of the loaded library (ncclGetVersion).
[[nodiscard]] std::string version();

}  // namespace tp::backend::cuda::nccl
