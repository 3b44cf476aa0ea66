#include "backend/cpu/kernels/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "backend/cpu/kernels/check.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {
namespace {

constexpr std::string_view kKernel = "matmul";

void check_blas_size(std::string_view name, std::int64_t value) {
  detail::check_size(kKernel, name, value);
  if (value > std::numeric_limits<int>::max()) {
    TP_THROW(InvalidArgument, detail::kComponent, kKernel, ": ", name, " = ", value,
             " exceeds the BLAS limit of ", std::numeric_limits<int>::max());
  }
}

// BLAS requires every leading dimension >= 1, even for an empty matrix.
int leading_dimension(std::int64_t columns) { return static_cast<int>(std::max<std::int64_t>(1, columns)); }

CBLAS_TRANSPOSE to_blas(Transpose transpose) { return transpose == Transpose::yes ? CblasTrans : CblasNoTrans; }

}  // namespace

template <typename T>
void matmul(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
            const T* a, const T* b, T beta, T* c) {
  check_blas_size("m", m);
  check_blas_size("n", n);
  check_blas_size("k", k);
  const std::int64_t c_size = detail::checked_product(kKernel, m, n);
  detail::check_pointer(kKernel, "a", a, detail::checked_product(kKernel, m, k));
  detail::check_pointer(kKernel, "b", b, detail::checked_product(kKernel, k, n));
  detail::check_pointer(kKernel, "c", c, c_size);
  if (c_size == 0) return;
  if (k == 0) {
    // Nothing to multiply: C = beta * C, with beta == 0 overwriting (BLAS semantics). Done here rather than
    // trusting every BLAS build's k == 0 path.
    if (beta == T{0}) {
      std::fill(c, c + c_size, T{0});
    } else {
      std::for_each(c, c + c_size, [beta](T& value) { value *= beta; });
    }
    return;
  }
  // Row-major storage: A is m x k (lda = k) or, transposed, k x m (lda = m); likewise B.
  const int lda = leading_dimension(transpose_a == Transpose::yes ? m : k);
  const int ldb = leading_dimension(transpose_b == Transpose::yes ? k : n);
  const int ldc = leading_dimension(n);
  const auto blas_m = static_cast<int>(m);
  const auto blas_n = static_cast<int>(n);
  const auto blas_k = static_cast<int>(k);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, to_blas(transpose_a), to_blas(transpose_b), blas_m, blas_n, blas_k, alpha, a, lda, b,
                ldb, beta, c, ldc);
  } else {
    static_assert(std::is_same_v<T, double>, "matmul is instantiated for float and double only");
    cblas_dgemm(CblasRowMajor, to_blas(transpose_a), to_blas(transpose_b), blas_m, blas_n, blas_k, alpha, a, lda, b,
                ldb, beta, c, ldc);
  }
}

template void matmul<float>(Transpose, Transpose, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                            const float*, float, float*);
template void matmul<double>(Transpose, Transpose, std::int64_t, std::int64_t, std::int64_t, double, const double*,
                             const double*, double, double*);

}  // namespace tp::backend::cpu
