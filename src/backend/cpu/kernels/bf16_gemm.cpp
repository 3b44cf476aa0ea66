// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/bf16_gemm.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "backend/cpu/intra_op_pool.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {

namespace {

using Shape = std::tuple<bool, bool, std::int64_t, std::int64_t, std::int64_t>;  // (trans a, trans b, m, n, k)

struct Matmul {
  dnnl::memory::desc a, b, c;
  dnnl::matmul primitive;
};

// One engine, stream and primitive cache per thread: device streams each run on their own thread.
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Shape, Matmul> primitives;
};

Context& context() {
  thread_local Context instance;
  return instance;
}

Matmul& matmul_for(Context& state, const Shape& shape) {
  const auto found = state.primitives.find(shape);
  if (found != state.primitives.end()) return found->second;
  const auto [transpose_a, transpose_b, m, n, k] = shape;
  using tag = dnnl::memory::data_type;
  // Logical A is [m, k], B [k, n]; a transposed operand is stored the other way round (strides swapped).
  const dnnl::memory::desc a({m, k}, tag::bf16, transpose_a ? dnnl::memory::dims{1, m} : dnnl::memory::dims{k, 1});
  const dnnl::memory::desc b({k, n}, tag::bf16, transpose_b ? dnnl::memory::dims{1, k} : dnnl::memory::dims{n, 1});
  const dnnl::memory::desc c({m, n}, tag::bf16, dnnl::memory::dims{n, 1});
  const dnnl::matmul::primitive_desc description(dnnl::matmul::desc(a, b, c), state.engine);
  return state.primitives.emplace(shape, Matmul{a, b, c, dnnl::matmul(description)}).first->second;
}

}  // namespace

bool bf16_gemm_native() {
  static const bool native = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return native;
}

void matmul_bf16_onednn(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                        const BFloat16* a, const BFloat16* b, BFloat16* c) {
  Context& state = context();
  try {
    Matmul& matmul = matmul_for(state, {transpose_a == Transpose::yes, transpose_b == Transpose::yes, m, n, k});
    // This thread's OpenMP team: the intra-op threads once set (the BLAS is then single-threaded), else as many
    // as the BLAS's default.
    omp_set_num_threads(std::max(intra_op_threads(), openblas_get_num_threads()));
    // oneDNN takes untyped, non-const handles; it only reads its SRC and WEIGHTS.
    matmul.primitive.execute(state.stream,
                             {{DNNL_ARG_SRC, dnnl::memory(matmul.a, state.engine, const_cast<BFloat16*>(a))},
                              {DNNL_ARG_WEIGHTS, dnnl::memory(matmul.b, state.engine, const_cast<BFloat16*>(b))},
                              {DNNL_ARG_DST, dnnl::memory(matmul.c, state.engine, c)}});
    state.stream.wait();
  } catch (const dnnl::error& error) {
    TP_THROW(DeviceError, "cpu", "matmul_bf16_onednn [", m, "x", k, "] x [", k, "x", n,
             "]: oneDNN failed: ", error.what());
  }
}

}  // namespace tp::backend::cpu
