// SPDX-License-Identifier: Apache-2.0
#pragma once
// Flush-to-zero and denormals-are-zero for the duration of a stream task, as TensorFlow's executor threads
// do: Adam's second moment decays towards zero and, once denormal, makes every multiply-add ~100x slower on
// x86. Results stay deterministic (the same inputs flush the same way on every run and backend).

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace tp::device {

class ScopedFlushDenormals {
 public:
#if defined(__SSE__)
  ScopedFlushDenormals() noexcept : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero); }
  ~ScopedFlushDenormals() { _mm_setcsr(saved_); }
#else
  ScopedFlushDenormals() noexcept = default;
#endif
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
#if defined(__SSE__)
  static constexpr unsigned kFlushToZero = 0x8000;
  static constexpr unsigned kDenormalsAreZero = 0x0040;
  unsigned saved_;
#endif
};

}  // namespace tp::device
