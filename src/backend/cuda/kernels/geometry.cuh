// SPDX-License-Identifier: Apache-2.0
#pragma once
// Launch geometry of the element-wise kernels, in plain C++ (the host tests check it without a GPU).
//
// Every element-wise kernel is a grid-stride loop over a 64-bit index: thread t of the grid handles elements
// t, t + stride, t + 2 stride, ... < n, stride = blocks * kThreads. So the grid need not cover n: it is capped
// at kMaxBlocks (enough to fill any current GPU many times over), and n beyond 2^31 is reached by the loop,
// never by an index that overflows 32 bits. The loop's last step (i + stride, i < n) fits in int64 for any n up
// to 2^63 - kMaxBlocks * kThreads: far more elements than any device holds.

#include <cstdint>

namespace tp::backend::cuda::kernels {

inline constexpr unsigned kThreads = 256;
inline constexpr std::int64_t kMaxBlocks = 65535;

// Blocks of kThreads for n elements: ceil(n / kThreads) computed in 64 bits, at least 1, at most kMaxBlocks.
constexpr unsigned grid_blocks(std::int64_t n) noexcept {
  if (n <= 0) return 1;
  const std::int64_t blocks = n / kThreads + (n % kThreads != 0 ? 1 : 0);
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

}  // namespace tp::backend::cuda::kernels
