// SPDX-License-Identifier: Apache-2.0
#pragma once
// TP_ISA_CLONES marks a hot element-wise kernel to be compiled once per x86-64 instruction set (SSE2, AVX2,
// AVX-512); the dynamic loader binds each call to the widest clone the running CPU supports (GNU ifunc). The
// library itself stays portable: no -march flag, one binary for every x86-64 machine.
//
// The clones compute bit-identical results: the files that use it (the CPU kernels, core's host conversions)
// are compiled with -ffp-contract=off (CMakeLists.txt), so no clone fuses a multiply and an add that the
// default clone rounds twice, and the marked loops have no reductions over floats that a wider vector would
// reassociate (GCC never does so without -ffast-math). Replicas on different machines therefore stay bitwise
// equal, and the tests compare against scalar formulas exactly (tests/backend/cpu/cpu_isa_clones_test.cpp).

// Sanitizer builds get the baseline loops only: the loader runs an ifunc resolver while it relocates the
// program, before the sanitizer's runtime is up, and an instrumented resolver crashes there (ThreadSanitizer
// segfaulted at start-up).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define TP_ISA_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define TP_ISA_CLONES
#endif
