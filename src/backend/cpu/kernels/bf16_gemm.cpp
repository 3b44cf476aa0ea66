// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/bf16_gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cpu/intra_op_pool.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {

namespace {

// The depth of one AMX tile's row of bfloat16 pairs (64 bytes), to which a shallow product is padded.
constexpr std::int64_t kTileDepth = 32;

// One block's product: its logical sizes and the leading dimensions of the caller's whole matrices, so a
// block of rows or columns reads its operands in place.
using Shape = std::tuple<bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                         std::int64_t>;  // (trans a, trans b, m, n, k, lda, ldb, ldc)

struct Matmul {
  dnnl::memory a, b, c;  // handles re-pointed at each call (set_data_handle): no memory object is built per call
  dnnl::matmul primitive;
};

// One engine, stream and primitive cache per thread: each device stream runs on its own thread, and so does
// each intra-op helper that computes blocks.
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Shape, Matmul> primitives;
};

Context& context() {
  thread_local Context instance;
  return instance;
}

// oneDNN shares primitive implementations between threads through its global primitive cache, which it
// publishes with synchronisation inside the uninstrumented library (ThreadSanitizer reports the key
// comparison of one thread against another's insertion as a race). Creating primitives and their descriptions
// one thread at a time orders every cache access by a lock we own; it costs nothing in steady state, where each
// thread finds its primitive in `Context::primitives` without creating one.
std::mutex& creation_mutex() {
  static std::mutex creation;
  return creation;
}

dnnl::matmul::primitive_desc describe(const dnnl::engine& engine, bool transpose_a, bool transpose_b, std::int64_t m,
                                      std::int64_t n, std::int64_t k, std::int64_t lda, std::int64_t ldb,
                                      std::int64_t ldc) {
  using tag = dnnl::memory::data_type;
  // Logical A is [m, k], B [k, n]; a transposed operand is stored the other way round (strides swapped).
  const dnnl::memory::desc a({m, k}, tag::bf16, transpose_a ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
  const dnnl::memory::desc b({k, n}, tag::bf16, transpose_b ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  const dnnl::memory::desc c({m, n}, tag::bf16, dnnl::memory::dims{ldc, 1});
  return {dnnl::matmul::desc(a, b, c), engine};
}

Matmul& matmul_for(Context& state, const Shape& shape) {
  const auto found = state.primitives.find(shape);
  if (found != state.primitives.end()) return found->second;
  const auto [transpose_a, transpose_b, m, n, k, lda, ldb, ldc] = shape;
  const std::lock_guard lock(creation_mutex());
  const dnnl::matmul::primitive_desc description =
      describe(state.engine, transpose_a, transpose_b, m, n, k, lda, ldb, ldc);
  Matmul matmul{dnnl::memory(description.src_desc(), state.engine, nullptr),
                dnnl::memory(description.weights_desc(), state.engine, nullptr),
                dnnl::memory(description.dst_desc(), state.engine, nullptr), dnnl::matmul(description)};
  return state.primitives.emplace(shape, std::move(matmul)).first->second;
}

// Whether oneDNN computes a product of depth k on AMX tiles (its implementation name says which kernels it
// picked; the depth alone decides it for the shapes asked here).
bool on_tiles(std::int64_t k) {
  const std::lock_guard lock(creation_mutex());
  try {
    const dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    const std::string kernels =
        describe(engine, false, false, kTileDepth, kTileDepth, k, k, kTileDepth, kTileDepth).impl_info_str();
    return kernels.find("amx") != std::string::npos;
  } catch (const dnnl::error&) {
    return false;  // no description: the product itself reports oneDNN's error
  }
}

// Per-thread scratch for a block's columns of a transposed A, grown to the largest seen and never shrunk.
std::vector<BFloat16>& packing_scratch() {
  thread_local std::vector<BFloat16> scratch;
  return scratch;
}

// Row-major operands with the leading dimensions of the whole product.
struct Operands {
  bool transpose_a, transpose_b;
  const BFloat16* a;
  std::int64_t lda;
  const BFloat16* b;
  std::int64_t ldb;
  BFloat16* c;
  std::int64_t ldc;

  // C (m x n) on this thread alone: a single-threaded oneDNN call (the blocks are this file's split).
  void gemm(std::int64_t m, std::int64_t n, std::int64_t k) const {
    // Before the primitive is made: oneDNN fixes a primitive's thread count when it is created.
    omp_set_num_threads(1);
    Context& state = context();
    Matmul& matmul = matmul_for(state, {transpose_a, transpose_b, m, n, k, lda, ldb, ldc});
    // oneDNN takes untyped, non-const handles; it only reads its SRC and WEIGHTS.
    matmul.a.set_data_handle(const_cast<BFloat16*>(a));
    matmul.b.set_data_handle(const_cast<BFloat16*>(b));
    matmul.c.set_data_handle(c);
    matmul.primitive.execute(state.stream,
                             {{DNNL_ARG_SRC, matmul.a}, {DNNL_ARG_WEIGHTS, matmul.b}, {DNNL_ARG_DST, matmul.c}});
    state.stream.wait();
  }

  // Rows [begin, begin + lines) of C from the same rows of op(A) and all of B. Every operand oneDNN sees is
  // dense (its brgemm kernels, the fast ones, take only dense matrices; a strided one gets a slower GEMM): C's
  // rows and A's rows are; a transposed A's columns are packed into this thread's scratch first.
  void gemm_rows(std::int64_t begin, std::int64_t lines, std::int64_t n, std::int64_t k) const {
    Operands part = *this;
    part.c += begin * ldc;
    if (!transpose_a) {
      part.a += begin * lda;
    } else {
      std::vector<BFloat16>& packed = packing_scratch();
      if (packed.size() < static_cast<std::size_t>(k * lines)) packed.resize(static_cast<std::size_t>(k * lines));
      for (std::int64_t row = 0; row < k; ++row) std::copy_n(a + row * lda + begin, lines, packed.data() + row * lines);
      part.a = packed.data();
      part.lda = lines;
    }
    part.gemm(lines, n, k);
  }
};

// A large product is split over the intra-op threads into blocks of C's rows, one single-threaded oneDNN call
// per block, as the float32 GEMM (gemm.cpp) is split: an OpenMP team inside oneDNN would add threads beside
// the intra-op pool's, which spin after each product and take the cores the element-wise kernels around it
// run on. Each element of C is one K-ordered sum whatever the block, so the bits do not depend on the thread
// count (cpu_thread_count_test checks it on the main job's shapes). Blocks are whole 16-row panels of at least
// kMinBlockWork multiply-adds: smaller products run whole.
constexpr std::int64_t kMinBlockWork = std::int64_t{1} << 20;
constexpr std::int64_t kPanel = 16;

std::int64_t block_rows(std::int64_t m, double work_per_row, int threads) {
  for (std::int64_t blocks = std::min<std::int64_t>(threads, m / kPanel); blocks >= 2; --blocks) {
    const std::int64_t size = ((m + blocks - 1) / blocks + kPanel - 1) / kPanel * kPanel;
    const std::int64_t last = m - (m - 1) / size * size;  // the shortest block
    if (size < m && static_cast<double>(last) * work_per_row >= static_cast<double>(kMinBlockWork)) return size;
  }
  return 0;
}

// Copies an operand of depth k into `out` with depth `padded`, the new depth's entries zero: [outer x k]
// (depth the inner index) into [outer x padded], or [k x outer] into [padded x outer].
const BFloat16* padded_operand(const BFloat16* from, std::int64_t outer, std::int64_t k, std::int64_t padded,
                               bool depth_inner, std::vector<BFloat16>& out) {
  out.resize(static_cast<std::size_t>(outer * padded));  // grown once per thread, then reused
  BFloat16* to = out.data();
  if (depth_inner) {
    for (std::int64_t line = 0; line < outer; ++line) {
      std::fill(std::copy_n(from + line * k, k, to + line * padded), to + (line + 1) * padded, BFloat16{});
    }
  } else {
    std::fill(std::copy_n(from, outer * k, to), to + outer * padded, BFloat16{});
  }
  return to;
}

struct PaddingScratch {
  std::vector<BFloat16> a, b;
};

PaddingScratch& padding_scratch() {
  thread_local PaddingScratch scratch;
  return scratch;
}

}  // namespace

std::int64_t bf16_gemm_tile_depth(std::int64_t k) {
  if (k >= kTileDepth) return k;
  static const bool tiles = bf16_gemm_native() && on_tiles(kTileDepth);
  if (!tiles) return k;
  // Per depth: 0 not yet asked, 1 on the tiles as it is, 2 only when padded. Two threads asking at once both
  // get the same answer.
  static std::array<std::atomic<int>, kTileDepth> decided{};
  std::atomic<int>& decision = decided[static_cast<std::size_t>(k)];
  if (decision.load(std::memory_order_relaxed) == 0) decision.store(on_tiles(k) ? 1 : 2, std::memory_order_relaxed);
  return decision.load(std::memory_order_relaxed) == 2 ? kTileDepth : k;
}

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
  matmul_bf16_onednn_at_depth(transpose_a, transpose_b, m, n, k, k, a, b, c);
}

void matmul_bf16_onednn_at_depth(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n,
                                 std::int64_t k, std::int64_t depth, const BFloat16* a, const BFloat16* b,
                                 BFloat16* c) {
  if (depth < k) {
    TP_THROW(InvalidArgument, "cpu", "matmul_bf16_onednn_at_depth: depth ", depth, " is below the product's depth ", k);
  }
  if (depth != k) {
    // The extra products are exact zeros: each element of C is the sum it was, taken on the tiles.
    PaddingScratch& scratch = padding_scratch();
    a = padded_operand(a, m, k, depth, transpose_a == Transpose::no, scratch.a);
    b = padded_operand(b, n, k, depth, transpose_b == Transpose::yes, scratch.b);
  }
  const Operands operands{.transpose_a = transpose_a == Transpose::yes,
                          .transpose_b = transpose_b == Transpose::yes,
                          .a = a,
                          .lda = transpose_a == Transpose::yes ? m : depth,
                          .b = b,
                          .ldb = transpose_b == Transpose::yes ? depth : n,
                          .c = c,
                          .ldc = n};
  const std::int64_t size = block_rows(m, static_cast<double>(n) * static_cast<double>(depth), intra_op_threads());
  const auto fail = [&](const char* what) {
    TP_THROW(DeviceError, "cpu", "matmul_bf16_onednn [", m, "x", k, "] x [", k, "x", n, "]: oneDNN failed: ", what);
  };
  if (size == 0) {
    try {
      operands.gemm(m, n, depth);
    } catch (const dnnl::error& error) {
      fail(error.what());
    }
    return;
  }
  // Indexed by block, so that a caller running everything itself still makes one call per block. A block's
  // failure (a primitive oneDNN cannot build) is kept and thrown here: parallel_for bodies must not throw.
  const std::int64_t blocks = (m + size - 1) / size;
  std::mutex failure_mutex;
  std::string failure;
  parallel_for(blocks, 1, [&](std::int64_t first_block, std::int64_t end_block) {
    for (std::int64_t block = first_block; block < end_block; ++block) {
      const std::int64_t begin = block * size;
      try {
        operands.gemm_rows(begin, std::min(m, begin + size) - begin, n, depth);
      } catch (const std::exception& error) {
        const std::lock_guard lock(failure_mutex);
        if (failure.empty()) failure = error.what();
      }
    }
  });
  if (!failure.empty()) fail(failure.c_str());
}

}  // namespace tp::backend::cpu
