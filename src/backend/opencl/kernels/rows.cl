// SPDX-License-Identifier: Apache-2.0
// Row and axis kernels of the OpenCL backend (OpenCL C 1.2): softmax and log-softmax, sparse cross-entropy
// (from logits and from probabilities), the correct-prediction count, and reductions (sum, mean, max, argmax)
// over the middle axis of an [outer, axis, inner] view. The semantics are the CPU kernels'
// (backend/cpu/kernels/softmax.hpp, cross_entropy.hpp, metrics.hpp, reduce.hpp).
//
// One work-item per row (or per output element of a reduction) walks its row in order, so sums are taken
// left to right as the CPU does, in double (float where the device has no float64), and each result is
// rounded once to T. Tensors are (__global T* base, ulong byte offset).

// Keras's backend epsilon: probabilities are clipped to [eps, 1 - eps] (cross_entropy.hpp).
#ifdef TP_FP64
#define ACCUMULATOR double
#define PROBABILITY_EPSILON 1e-7
#else
#define ACCUMULATOR float
#define PROBABILITY_EPSILON 1e-7f
#endif

// The maximum of a row (NaN if any entry is NaN) and the sum of exp(x - max): softmax.hpp's RowShift.
#define ROW_SHIFT(T, row, cols, max, sum_exp)                                                                          \
  ACCUMULATOR max = (ACCUMULATOR)(row)[0];                                                                             \
  for (ulong c = 1; c < (cols) && !isnan(max); ++c) {                                                                  \
    const ACCUMULATOR value = (ACCUMULATOR)(row)[c];                                                                   \
    if (value > max || isnan(value)) max = value;                                                                      \
  }                                                                                                                    \
  ACCUMULATOR sum_exp = 0;                                                                                             \
  for (ulong c = 0; c < (cols); ++c) sum_exp += exp((ACCUMULATOR)(row)[c] - max);

// True when `candidate` replaces `best` as the maximum: strictly greater (ties keep the first), or the first
// NaN (after which nothing replaces it): reduce.hpp's rule, also correct_count's.
#define TAKES_OVER(candidate, best) (!isnan(best) && ((candidate) > (best) || isnan(candidate)))

// The label of row r (int32 or, when labels_64 != 0, int64 labels); the kernels' label parameters are named
// labels, labels_offset and labels_64.
#define LABEL_OF(r)                                                                                                    \
  (labels_64 != 0u ? TP_AT(const long, labels, labels_offset)[r] : (long)TP_AT(const int, labels, labels_offset)[r])

// The start of a cross-entropy row: its label, input row and gradient row. Labels were checked
// (check_labels); a row whose label is out of range still never reads outside x: its loss and gradient are NaN.
#define CROSS_ENTROPY_ROW(T, label, row, grad)                                                                         \
  const long label = LABEL_OF(r);                                                                                      \
  __global const T* row = TP_AT(const T, x, x_offset) + r * cols;                                                      \
  __global T* grad = TP_AT(T, gradient, gradient_offset) + r * cols;                                                   \
  if (label < 0 || label >= (long)cols) {                                                                              \
    TP_AT(T, loss, loss_offset)[r] = (T)NAN;                                                                           \
    if (has_gradient != 0u)                                                                                            \
      for (ulong c = 0; c < cols; ++c) grad[c] = (T)NAN;                                                               \
    return;                                                                                                            \
  }

// first_bad (set to UINT_MAX by the launcher) = the smallest row whose label lies outside [0, cols): the
// launchers read it back before the loss or count kernels run and refuse a bad label as the CPU kernels do.
__kernel void check_labels(__global const void* labels, ulong labels_offset, uint labels_64, ulong rows, ulong cols,
                           __global uint* first_bad, ulong first_bad_offset) {
  const size_t r = get_global_id(0);
  if (r >= rows) return;
  const long label = LABEL_OF(r);
  if (label < 0 || label >= (long)cols) atomic_min(TP_AT(uint, first_bad, first_bad_offset), (uint)r);
}

#define ROW_KERNELS(S, T)                                                                                              \
  /* y[r, :] = softmax or (logarithm != 0) log-softmax of x[r, :]; y may alias x. */                                   \
  __kernel void softmax_##S(__global const T* x, ulong x_offset, __global T* y, ulong y_offset, ulong rows,            \
                            ulong cols, uint logarithm) {                                                              \
    const size_t r = get_global_id(0);                                                                                 \
    if (r >= rows) return;                                                                                             \
    __global const T* in = TP_AT(const T, x, x_offset) + r * cols;                                                     \
    __global T* out = TP_AT(T, y, y_offset) + r * cols;                                                                \
    ROW_SHIFT(T, in, cols, max, sum_exp)                                                                               \
    if (logarithm != 0u) {                                                                                             \
      const ACCUMULATOR log_sum = log(sum_exp);                                                                        \
      for (ulong c = 0; c < cols; ++c) out[c] = (T)(((ACCUMULATOR)in[c] - max) - log_sum);                             \
    } else {                                                                                                           \
      for (ulong c = 0; c < cols; ++c) out[c] = (T)(exp((ACCUMULATOR)in[c] - max) / sum_exp);                          \
    }                                                                                                                  \
  }                                                                                                                    \
  /* From logits: loss[r] = log(s) - (x[label] - m); gradient[r, c] = softmax[c] - (c == label). */                    \
  __kernel void cross_entropy_logits_##S(__global const T* x, ulong x_offset, __global const void* labels,             \
                                         ulong labels_offset, uint labels_64, __global T* loss, ulong loss_offset,     \
                                         __global T* gradient, ulong gradient_offset, uint has_gradient,               \
                                         ulong rows, ulong cols) {                                                     \
    const size_t r = get_global_id(0);                                                                                 \
    if (r >= rows) return;                                                                                             \
    CROSS_ENTROPY_ROW(T, label, row, grad)                                                                             \
    ROW_SHIFT(T, row, cols, max, sum_exp)                                                                              \
    TP_AT(T, loss, loss_offset)[r] = (T)(log(sum_exp) - ((ACCUMULATOR)row[label] - max));                              \
    if (has_gradient == 0u) return;                                                                                    \
    for (ulong c = 0; c < cols; ++c) {                                                                                 \
      const ACCUMULATOR probability = exp((ACCUMULATOR)row[c] - max) / sum_exp;                                        \
      grad[c] = (T)((long)c == label ? probability - (ACCUMULATOR)1 : probability);                                    \
    }                                                                                                                  \
  }                                                                                                                    \
  /* From probabilities (Keras): with p clipped to [eps, 1 - eps] and S the row's clipped sum, */                      \
  /* loss[r] = log(S) - log(clip(p[label])); gradient = 1 / S - (c == label) / p inside the clip range, else 0. */     \
  __kernel void cross_entropy_probabilities_##S(__global const T* x, ulong x_offset, __global const void* labels,      \
                                                ulong labels_offset, uint labels_64, __global T* loss,                 \
                                                ulong loss_offset, __global T* gradient, ulong gradient_offset,        \
                                                uint has_gradient, ulong rows, ulong cols) {                           \
    const size_t r = get_global_id(0);                                                                                 \
    if (r >= rows) return;                                                                                             \
    CROSS_ENTROPY_ROW(T, label, row, grad)                                                                             \
    const ACCUMULATOR low = PROBABILITY_EPSILON;                                                                       \
    const ACCUMULATOR high = (ACCUMULATOR)1 - PROBABILITY_EPSILON;                                                     \
    ACCUMULATOR clipped_sum = 0;                                                                                       \
    for (ulong c = 0; c < cols; ++c) clipped_sum += clamp((ACCUMULATOR)row[c], low, high);                             \
    const ACCUMULATOR probability = (ACCUMULATOR)row[label];                                                           \
    TP_AT(T, loss, loss_offset)[r] =                                                                                   \
        (T)(log(clipped_sum) - log(clamp(probability, low, high)));                                                    \
    if (has_gradient == 0u) return;                                                                                    \
    for (ulong c = 0; c < cols; ++c) {                                                                                 \
      const ACCUMULATOR value = (ACCUMULATOR)row[c];                                                                   \
      const int inside = value >= low && value <= high;                                                                \
      grad[c] = inside ? (T)((ACCUMULATOR)1 / clipped_sum - ((long)c == label ? (ACCUMULATOR)1 / value : 0))           \
                       : (T)0;                                                                                         \
    }                                                                                                                  \
  }                                                                                                                    \
  /* out[0] (float32) = the number of rows whose argmax (TAKES_OVER's rule) equals the label (labels checked */        \
  /* by check_labels; one out of range never counts). One work-group: each work-item counts a stride of rows */        \
  /* into `partial`, then work-item 0 adds them in order. */                                                           \
  __kernel void correct_count_##S(__global const T* x, ulong x_offset, __global const void* labels,                    \
                                  ulong labels_offset, uint labels_64, __global float* out, ulong out_offset,          \
                                  ulong rows, ulong cols, __local uint* partial) {                                     \
    const size_t id = get_local_id(0);                                                                                 \
    const size_t size = get_local_size(0);                                                                             \
    uint count = 0;                                                                                                    \
    for (size_t r = id; r < rows; r += size) {                                                                         \
      __global const T* row = TP_AT(const T, x, x_offset) + r * cols;                                                  \
      ulong best = 0;                                                                                                  \
      for (ulong c = 1; c < cols; ++c)                                                                                 \
        if (TAKES_OVER(row[c], row[best])) best = c;                                                                   \
      const long label = LABEL_OF(r);                                                                                  \
      if (label >= 0 && label < (long)cols && (ulong)label == best) ++count;                                           \
    }                                                                                                                  \
    partial[id] = count;                                                                                               \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                                      \
    if (id != 0) return;                                                                                               \
    ulong total = 0;                                                                                                   \
    for (size_t i = 0; i < size; ++i) total += partial[i];                                                             \
    TP_AT(float, out, out_offset)[0] = (float)total;                                                                   \
  }                                                                                                                    \
  /* out[o, i] = sum (reduction 0), mean (1) or max (2) of x[o, :, i]; one work-item per output. Sums are */           \
  /* sequential in the accumulator; the mean of an empty axis is NaN; max needs axis >= 1 (the launcher */             \
  /* checks) and takes NaN over everything. */                                                                         \
  __kernel void reduce_##S(__global const T* x, ulong x_offset, __global T* out, ulong out_offset, ulong axis,         \
                           ulong inner, uint reduction, ulong n) {                                                     \
    const size_t j = get_global_id(0);                                                                                 \
    if (j >= n) return;                                                                                                \
    const ulong o = j / inner;                                                                                         \
    __global const T* first = TP_AT(const T, x, x_offset) + o * axis * inner + j % inner;                              \
    if (reduction == 2u) {                                                                                             \
      T best = first[0];                                                                                               \
      for (ulong a = 1; a < axis; ++a)                                                                                 \
        if (TAKES_OVER(first[a * inner], best)) best = first[a * inner];                                               \
      TP_AT(T, out, out_offset)[j] = best;                                                                             \
      return;                                                                                                          \
    }                                                                                                                  \
    ACCUMULATOR sum = 0;                                                                                               \
    for (ulong a = 0; a < axis; ++a) sum += (ACCUMULATOR)first[a * inner];                                             \
    if (reduction == 1u) sum = axis == 0 ? (ACCUMULATOR)NAN : sum / (ACCUMULATOR)axis;                                 \
    TP_AT(T, out, out_offset)[j] = (T)sum;                                                                             \
  }                                                                                                                    \
  /* out[o, i] (int64) = the index of the first maximum of x[o, :, i] (the first NaN if any); axis >= 1. */            \
  __kernel void argmax_##S(__global const T* x, ulong x_offset, __global long* out, ulong out_offset, ulong axis,      \
                           ulong inner, ulong n) {                                                                     \
    const size_t j = get_global_id(0);                                                                                 \
    if (j >= n) return;                                                                                                \
    const ulong o = j / inner;                                                                                         \
    __global const T* first = TP_AT(const T, x, x_offset) + o * axis * inner + j % inner;                              \
    T best = first[0];                                                                                                 \
    long index = 0;                                                                                                    \
    for (ulong a = 1; a < axis; ++a) {                                                                                 \
      if (TAKES_OVER(first[a * inner], best)) {                                                                        \
        best = first[a * inner];                                                                                       \
        index = (long)a;                                                                                               \
      }                                                                                                                \
    }                                                                                                                  \
    TP_AT(long, out, out_offset)[j] = index;                                                                           \
  }

ROW_KERNELS(f32, float)
#ifdef TP_FP64
ROW_KERNELS(f64, double)
#endif
