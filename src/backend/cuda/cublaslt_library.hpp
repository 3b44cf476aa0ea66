// SPDX-License-Identifier: Apache-2.0
#pragma once
// cuBLASLt, loaded at run time: the binaries link no libcublasLt, so a process that never multiplies on a GPU
// never maps it (a large library: the dynamic loader's relocations alone put a big share of it into the
// resident set of every run, GPU or not). The first cuda:N product, or the first cuBLAS status turned into a
// message, loads it: TP_CUBLASLT_LIBRARY when set (and not empty), else "libcublasLt.so.<major>" through the
// loader's search path, else the same name in the toolkit folder the build found. A library that cannot be
// loaded, or lacks a function, is a tp::DeviceError naming it and the fix.
//
// The types are cublasLt.h's (the header is part of the toolkit the build needs anyway); the table holds the
// functions tensorpool calls, with their declared types, so a changed signature fails the build, not a run.
#include <cublasLt.h>

#include <string>

namespace tp::backend::cuda::cublaslt {

struct Library {
  std::string path;  // what dlopen was given and accepted
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtGetStatusName) GetStatusName;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
};

// The names tried in order: TP_CUBLASLT_LIBRARY alone when set, else the soname through the search path and
// then in the build's toolkit folder.
[[nodiscard]] std::string library_names();

// cuBLASLt as library_names() names it now, loaded on the first call for those names that succeeds (later
// calls return it; a failed load is retried, so a fixed TP_CUBLASLT_LIBRARY takes effect). tp::DeviceError "cannot load cuBLASLt (<names>): <dlerror>" with
// the fix, or naming a function the library lacks.
const Library& library();

}  // namespace tp::backend::cuda::cublaslt
