#pragma once
// The GEMMs of one training step of the 784-512-10 MLP (row-major, as ops::matmul_into calls them): forward
// dense 1 and 2, the layer-2 input gradient, both weight gradients; 2 x (784x512 + 512x10 + 512x10 + 784x512 +
// 512x10) = 1,636,352 FLOPs per sample.

#include <cstdint>
#include <vector>

namespace tp::bench {

struct GemmCase {
  const char* role;
  std::int64_t m, n, k;
  bool transpose_a, transpose_b;
};

inline std::vector<GemmCase> training_gemms(std::int64_t batch) {
  return {
      {"forward dense 1", batch, 512, 784, false, false},      {"forward dense 2", batch, 10, 512, false, false},
      {"grad input 2 (dy W^T)", batch, 512, 10, false, true},  {"grad kernel 1 (x^T dy)", 784, 512, batch, true, false},
      {"grad kernel 2 (h^T dy)", 512, 10, batch, true, false},
  };
}

}  // namespace tp::bench
