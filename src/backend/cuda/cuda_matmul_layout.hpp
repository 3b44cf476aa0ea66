// SPDX-License-Identifier: Apache-2.0
#pragma once
// How a row-major product maps onto cuBLASLt's column-major one, in plain C++ (unit-tested without a GPU).
//
// A row-major [r, c] matrix with leading dimension c is, read column-major, the [c, r] matrix of its transpose.
// So C = op(A) op(B), row-major [m, n], is computed as C^T = op(B)^T op(A)^T, column-major [n, m]: cuBLASLt's
// first operand is our B, its second our A, its (m, n, k) our (n, m, k), and every operand keeps its row
// length as its leading dimension. An operand stored transposed is passed with CUBLAS_OP_T.

#include <cstdint>

namespace tp::backend::cuda {

// One operand as cuBLASLt sees it: its layout as stored (rows, cols, leading dimension, column-major) and
// whether the product reads it transposed.
struct LtOperand {
  std::int64_t rows, cols, ld;
  bool transpose;
  friend constexpr bool operator==(const LtOperand&, const LtOperand&) = default;
};

struct LtGemm {
  std::int64_t m, n, k;  // cuBLASLt's: C' [m, n] = op(A') [m, k] op(B') [k, n]
  LtOperand a, b;        // A' is our B, B' is our A
  LtOperand c;           // C' is our C, column-major [n_ours, m_ours]
  friend constexpr bool operator==(const LtGemm&, const LtGemm&) = default;
};

// The cuBLASLt call of row-major out[m, n] = op(a)[m, k] op(b)[k, n], where a is stored [m, k] (or [k, m] with
// transpose_a) and b [k, n] (or [n, k] with transpose_b).
constexpr LtGemm lt_gemm_of(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k) {
  // Our b stored [k, n] reads column-major as [n, k] (ld n) = op(b)^T already; stored [n, k] it reads as
  // [k, n] (ld k), transposed by the op.
  const LtOperand first = transpose_b ? LtOperand{k, n, k, true} : LtOperand{n, k, n, false};
  // Our a stored [m, k] reads as [k, m] (ld k) = op(a)^T; stored [k, m] it reads as [m, k] (ld m), transposed.
  const LtOperand second = transpose_a ? LtOperand{m, k, m, true} : LtOperand{k, m, k, false};
  return LtGemm{n, m, k, first, second, LtOperand{n, m, n, false}};
}

}  // namespace tp::backend::cuda
