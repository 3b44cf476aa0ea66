// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/reduce.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string_view>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/isa_clones.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {
namespace {

// Outputs are produced `kBlock` inner positions at a time, so each pass along the axis reads contiguous
// memory and the partial results live on the stack (no heap allocation in a kernel).
constexpr std::int64_t kBlock = 64;

struct View {
  std::int64_t outer;
  std::int64_t axis;
  std::int64_t inner;
};

// Validates the view and the pointers; returns false when the output is empty (nothing to do).
template <typename T, typename Out>
bool check_view(std::string_view kernel, const T* x, const Out* y, View view, bool needs_elements) {
  detail::check_size(kernel, "outer", view.outer);
  detail::check_size(kernel, "axis", view.axis);
  detail::check_size(kernel, "inner", view.inner);
  const std::int64_t out_count = detail::checked_product(kernel, view.outer, view.inner);
  const std::int64_t in_count = detail::checked_product(kernel, out_count, view.axis);
  if (needs_elements && view.axis == 0) {
    TP_THROW(InvalidArgument, detail::kComponent, kernel, ": cannot reduce an empty axis (axis length ", view.axis,
             "); there is no identity");
  }
  detail::check_pointer(kernel, "x", x, in_count);
  detail::check_pointer(kernel, "y", y, out_count);
  return out_count > 0;
}

// Calls `block(o, first, begin, width)` for each outer index o and each block [begin, begin + width) of
// inner positions; `first` points at x(o, 0, begin) and consecutive axis steps are `inner` elements apart.
// Blocks are independent (each reduces its own inner positions in axis order), so they are spread over the
// intra-op threads without changing a result.
template <typename T, typename Block>
void for_each_block(const T* x, View view, Block&& block) {
  const std::int64_t blocks_per_outer = (view.inner + kBlock - 1) / kBlock;
  const std::int64_t elements_per_block = std::max<std::int64_t>(1, view.axis) * kBlock;
  parallel_for(view.outer * blocks_per_outer, std::max<std::int64_t>(1, kStreamingGrain / elements_per_block),
               [&](std::int64_t first_block, std::int64_t end_block) {
                 for (std::int64_t index = first_block; index < end_block; ++index) {
                   const std::int64_t o = index / blocks_per_outer;
                   const std::int64_t begin = (index % blocks_per_outer) * kBlock;
                   const std::int64_t width = std::min(kBlock, view.inner - begin);
                   block(o, x + o * view.axis * view.inner + begin, begin, width);
                 }
               });
}

// sums[j] += first[a * stride + j] for every a in [0, rows), in order, each term widened exactly to double: the
// sums of one block of inner positions. Width is a template argument for full blocks, so the sums stay in
// vector registers across the rows instead of going through memory every row; every clone adds the same terms
// in the same order (isa_clones.hpp), so the bits are those of the scalar loop.
template <std::int64_t Width, typename T>
TP_ISA_CLONES void add_rows_fixed(const T* first, std::int64_t rows, std::int64_t stride, double* sums) {
  std::array<double, Width> partial;
  std::copy_n(sums, Width, partial.begin());
  for (std::int64_t a = 0; a < rows; ++a) {
    const T* row = first + a * stride;
    for (std::int64_t j = 0; j < Width; ++j) partial[j] += static_cast<double>(row[j]);
  }
  std::copy_n(partial.begin(), Width, sums);
}

template <typename T>
TP_ISA_CLONES void add_rows(const T* first, std::int64_t rows, std::int64_t stride, std::int64_t width, double* sums) {
  for (std::int64_t a = 0; a < rows; ++a) {
    const T* row = first + a * stride;
    for (std::int64_t j = 0; j < width; ++j) sums[j] += static_cast<double>(row[j]);
  }
}

template <typename T>
void sum_into(const T* x, T* y, View view, bool mean) {
  const double divisor = static_cast<double>(view.axis);
  for_each_block(x, view, [&](std::int64_t o, const T* first, std::int64_t begin, std::int64_t width) {
    std::array<double, kBlock> sums{};
    if (width == kBlock) {
      add_rows_fixed<kBlock>(first, view.axis, view.inner, sums.data());
    } else {
      add_rows(first, view.axis, view.inner, width, sums.data());
    }
    T* out = y + o * view.inner + begin;
    for (std::int64_t j = 0; j < width; ++j) {
      if (!mean) {
        out[j] = static_cast<T>(sums[j]);
      } else {
        out[j] = view.axis == 0 ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(sums[j] / divisor);
      }
    }
  });
}

// True when `candidate` replaces `best` as the maximum: strictly greater (so ties keep the first index), or
// the first NaN (after which nothing replaces it).
template <typename T>
bool takes_over(T candidate, T best) {
  return !std::isnan(best) && (candidate > best || std::isnan(candidate));
}

}  // namespace

template <typename T>
void reduce_sum(const T* x, T* y, std::int64_t outer, std::int64_t axis, std::int64_t inner) {
  const View view{outer, axis, inner};
  if (check_view("reduce_sum", x, y, view, false)) sum_into(x, y, view, false);
}

template <typename T>
void reduce_mean(const T* x, T* y, std::int64_t outer, std::int64_t axis, std::int64_t inner) {
  const View view{outer, axis, inner};
  if (check_view("reduce_mean", x, y, view, false)) sum_into(x, y, view, true);
}

template <typename T>
void reduce_max(const T* x, T* y, std::int64_t outer, std::int64_t axis, std::int64_t inner) {
  const View view{outer, axis, inner};
  if (!check_view("reduce_max", x, y, view, true)) return;
  for_each_block(x, view, [&](std::int64_t o, const T* first, std::int64_t begin, std::int64_t width) {
    T* out = y + o * inner + begin;
    std::copy(first, first + width, out);
    for (std::int64_t a = 1; a < axis; ++a) {
      const T* row = first + a * inner;
      for (std::int64_t j = 0; j < width; ++j) {
        if (takes_over(row[j], out[j])) out[j] = row[j];
      }
    }
  });
}

template <typename T>
void argmax(const T* x, std::int64_t* y, std::int64_t outer, std::int64_t axis, std::int64_t inner) {
  const View view{outer, axis, inner};
  if (!check_view("argmax", x, y, view, true)) return;
  for_each_block(x, view, [&](std::int64_t o, const T* first, std::int64_t begin, std::int64_t width) {
    std::array<T, kBlock> best{};
    std::copy(first, first + width, best.begin());
    std::int64_t* out = y + o * inner + begin;
    std::fill(out, out + width, std::int64_t{0});
    for (std::int64_t a = 1; a < axis; ++a) {
      const T* row = first + a * inner;
      for (std::int64_t j = 0; j < width; ++j) {
        if (takes_over(row[j], best[j])) {
          best[j] = row[j];
          out[j] = a;
        }
      }
    }
  });
}

#define TP_CPU_REDUCE_INSTANTIATE(T)                                                    \
  template void reduce_sum<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t);  \
  template void reduce_mean<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t); \
  template void reduce_max<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t);  \
  template void argmax<T>(const T*, std::int64_t*, std::int64_t, std::int64_t, std::int64_t);
TP_CPU_REDUCE_INSTANTIATE(float)
TP_CPU_REDUCE_INSTANTIATE(double)

}  // namespace tp::backend::cpu
