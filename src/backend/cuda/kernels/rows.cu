// SPDX-License-Identifier: Apache-2.0
// Row and axis kernels: softmax and log-softmax, sparse cross-entropy (from logits and from probabilities), the
// label check, the correct count, and reductions (sum, mean, max, argmax) over the middle axis of an
// [outer, axis, inner] view. Semantics: backend/cpu/kernels/softmax.hpp, cross_entropy.hpp, metrics.hpp,
// reduce.hpp (the OpenCL backend's rows.cl follows the same).
//
// One thread per row (or per output element of a reduction) walks its row in order: sums are taken left to
// right in double as the CPU does and each result is rounded once to T. No floating-point atomics anywhere:
// the results repeat bit for bit.
#include "backend/cuda/kernels/device_common.cuh"

namespace tp::backend::cuda::kernels {
namespace {

// Keras's backend epsilon: probabilities are clipped to [eps, 1 - eps] (cross_entropy.hpp).
constexpr double kProbabilityEpsilon = 1e-7;

__device__ inline std::int64_t label_of(const void* labels, bool labels_64, std::int64_t r) {
  return labels_64 ? static_cast<const std::int64_t*>(labels)[r]
                   : static_cast<std::int64_t>(static_cast<const std::int32_t*>(labels)[r]);
}

// True when `candidate` replaces `best` as the maximum: strictly greater (ties keep the first), or the first
// NaN (after which nothing replaces it).
// std::clamp's rule (a NaN stays NaN).
__device__ inline double clamp(double v, double low, double high) { return v < low ? low : high < v ? high : v; }

template <typename T>
__device__ inline bool takes_over(T candidate, T best) {
  return !isnan(best) && (candidate > best || isnan(candidate));
}

// The row's maximum (NaN if any entry is NaN) and the sum of exp(x - max): softmax.hpp's RowShift.
struct RowShift {
  double max, sum_exp;
};
template <typename T>
__device__ inline RowShift row_shift(const T* row, std::int64_t cols) {
  double max = static_cast<double>(row[0]);
  for (std::int64_t c = 1; c < cols && !isnan(max); ++c) {
    const auto value = static_cast<double>(row[c]);
    if (value > max || isnan(value)) max = value;
  }
  double sum = 0;
  for (std::int64_t c = 0; c < cols; ++c) sum = __dadd_rn(sum, exp(__dsub_rn(static_cast<double>(row[c]), max)));
  return RowShift{max, sum};
}

// One block: each thread finds the first bad row of its stride, the block takes the minimum in shared memory,
// thread 0 stores (row, label) or (-1, 0).
__global__ void check_labels_kernel(const void* labels, bool labels_64, std::int64_t rows, std::int64_t cols,
                                    std::int64_t* status) {
  __shared__ std::int64_t first[kThreads];
  std::int64_t mine = rows;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const std::int64_t label = label_of(labels, labels_64, r);
    if (label < 0 || label >= cols) {
      mine = r;
      break;
    }
  }
  first[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && first[threadIdx.x + half] < first[threadIdx.x]) {
      first[threadIdx.x] = first[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  const std::int64_t row = first[0];
  status[0] = row < rows ? row : -1;
  status[1] = row < rows ? label_of(labels, labels_64, row) : 0;
}

template <typename T>
__global__ void softmax_kernel(const T* x, T* out, std::int64_t rows, std::int64_t cols, bool log_form) {
  TP_GRID_STRIDE(r, rows) {
    const T* in = x + r * cols;
    T* y = out + r * cols;
    const RowShift shift = row_shift(in, cols);
    // Each y[c] is written after in[c] was read for the last time: y may alias x.
    if (log_form) {
      const double log_sum = log(shift.sum_exp);
      for (std::int64_t c = 0; c < cols; ++c) {
        y[c] = static_cast<T>(__dsub_rn(__dsub_rn(static_cast<double>(in[c]), shift.max), log_sum));
      }
    } else {
      for (std::int64_t c = 0; c < cols; ++c) {
        y[c] = static_cast<T>(__ddiv_rn(exp(__dsub_rn(static_cast<double>(in[c]), shift.max)), shift.sum_exp));
      }
    }
  }
}

template <typename T>
__global__ void cross_entropy_kernel(bool from_logits, const T* x, const void* labels, bool labels_64, T* loss,
                                     T* gradient, std::int64_t rows, std::int64_t cols) {
  TP_GRID_STRIDE(r, rows) {
    const std::int64_t label = label_of(labels, labels_64, r);
    const T* row = x + r * cols;
    T* grad = gradient != nullptr ? gradient + r * cols : nullptr;
    if (label < 0 || label >= cols) {  // reported by the label check; never read outside the row
      loss[r] = static_cast<T>(nan(""));
      if (grad != nullptr) {
        for (std::int64_t c = 0; c < cols; ++c) grad[c] = static_cast<T>(nan(""));
      }
      continue;
    }
    if (from_logits) {
      // logsumexp - x[label] = log(s) - (x[label] - m).
      const RowShift shift = row_shift(row, cols);
      loss[r] = static_cast<T>(__dsub_rn(log(shift.sum_exp), __dsub_rn(static_cast<double>(row[label]), shift.max)));
      if (grad == nullptr) continue;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double probability = __ddiv_rn(exp(__dsub_rn(static_cast<double>(row[c]), shift.max)), shift.sum_exp);
        grad[c] = static_cast<T>(c == label ? __dsub_rn(probability, 1.0) : probability);
      }
    } else {
      // Keras: with p clipped to [eps, 1 - eps] and S the row's clipped sum, loss = log(S) - log(clip(p[label]));
      // gradient = 1 / S - (c == label) / p inside the clip range, else 0.
      constexpr double kLow = kProbabilityEpsilon;
      constexpr double kHigh = 1.0 - kProbabilityEpsilon;
      double clipped_sum = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        clipped_sum = __dadd_rn(clipped_sum, clamp(static_cast<double>(row[c]), kLow, kHigh));
      }
      const auto probability = static_cast<double>(row[label]);
      loss[r] = static_cast<T>(__dsub_rn(log(clipped_sum), log(clamp(probability, kLow, kHigh))));
      if (grad == nullptr) continue;
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto value = static_cast<double>(row[c]);
        const bool inside = value >= kLow && value <= kHigh;
        grad[c] = inside
                      ? static_cast<T>(__dsub_rn(__ddiv_rn(1.0, clipped_sum), c == label ? __ddiv_rn(1.0, value) : 0.0))
                      : T{0};
      }
    }
  }
}

// One block: each thread counts a stride of rows, the block adds the integer counts in shared memory.
template <typename T>
__global__ void correct_count_kernel(const T* x, const void* labels, bool labels_64, float* out, std::int64_t rows,
                                     std::int64_t cols) {
  __shared__ unsigned long long counts[kThreads];
  unsigned long long count = 0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const T* row = x + r * cols;
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < cols; ++c) {
      if (takes_over(row[c], row[best])) best = c;
    }
    const std::int64_t label = label_of(labels, labels_64, r);
    if (label >= 0 && label < cols && label == best) ++count;
  }
  counts[threadIdx.x] = count;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) counts[threadIdx.x] += counts[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<float>(counts[0]);
}

// reduction 0 sum, 1 mean, 2 max; max needs axis >= 1 (the adapter checks) and takes NaN over everything; the
// mean of an empty axis is NaN.
template <typename T>
__global__ void reduce_kernel(int reduction, const T* x, T* out, std::int64_t axis, std::int64_t inner,
                              std::int64_t n) {
  TP_GRID_STRIDE(j, n) {
    const std::int64_t o = j / inner;
    const T* first = x + o * axis * inner + j % inner;
    if (reduction == 2) {
      T best = first[0];
      for (std::int64_t a = 1; a < axis; ++a) {
        if (takes_over(first[a * inner], best)) best = first[a * inner];
      }
      out[j] = best;
      continue;
    }
    double sum = 0;
    for (std::int64_t a = 0; a < axis; ++a) sum = __dadd_rn(sum, static_cast<double>(first[a * inner]));
    if (reduction == 1) sum = axis == 0 ? nan("") : __ddiv_rn(sum, static_cast<double>(axis));
    out[j] = static_cast<T>(sum);
  }
}

template <typename T>
__global__ void argmax_kernel(const T* x, std::int64_t* out, std::int64_t axis, std::int64_t inner, std::int64_t n) {
  TP_GRID_STRIDE(j, n) {
    const std::int64_t o = j / inner;
    const T* first = x + o * axis * inner + j % inner;
    T best = first[0];
    std::int64_t index = 0;
    for (std::int64_t a = 1; a < axis; ++a) {
      if (takes_over(first[a * inner], best)) {
        best = first[a * inner];
        index = a;
      }
    }
    out[j] = index;
  }
}

}  // namespace

cudaError_t launch_check_labels(const void* labels, bool labels_64, std::int64_t rows, std::int64_t cols,
                                std::int64_t* status, cudaStream_t stream) {
  check_labels_kernel<<<1, kThreads, 0, stream>>>(labels, labels_64, rows, cols, status);
  return launched();
}

cudaError_t launch_softmax(Dtype dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols, bool log,
                           cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    softmax_kernel<T>
        <<<grid_blocks(rows), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(out), rows, cols, log);
    return launched();
  });
}

cudaError_t launch_cross_entropy(Dtype dtype, bool from_logits, const void* x, const void* labels, bool labels_64,
                                 void* loss, void* gradient, std::int64_t rows, std::int64_t cols,
                                 cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    cross_entropy_kernel<T><<<grid_blocks(rows), kThreads, 0, stream>>>(from_logits, static_cast<const T*>(x), labels,
                                                                        labels_64, static_cast<T*>(loss),
                                                                        static_cast<T*>(gradient), rows, cols);
    return launched();
  });
}

cudaError_t launch_correct_count(Dtype dtype, const void* x, const void* labels, bool labels_64, float* out,
                                 std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    correct_count_kernel<T><<<1, kThreads, 0, stream>>>(static_cast<const T*>(x), labels, labels_64, out, rows, cols);
    return launched();
  });
}

cudaError_t launch_reduce(Dtype dtype, int reduction, const void* x, void* out, std::int64_t axis, std::int64_t inner,
                          std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    reduce_kernel<T><<<grid_blocks(n), kThreads, 0, stream>>>(reduction, static_cast<const T*>(x), static_cast<T*>(out),
                                                              axis, inner > 0 ? inner : 1, n);
    return launched();
  });
}

cudaError_t launch_argmax(Dtype dtype, const void* x, std::int64_t* out, std::int64_t axis, std::int64_t inner,
                          std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    argmax_kernel<T>
        <<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(x), out, axis, inner > 0 ? inner : 1, n);
    return launched();
  });
}

}  // namespace tp::backend::cuda::kernels
