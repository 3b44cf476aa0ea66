// SPDX-License-Identifier: Apache-2.0
// MatMul through cuBLASLt: row-major tensors mapped onto its column-major product (cuda_matmul_layout.hpp).
// - float32: CUBLAS_COMPUTE_32F (full float32 products, no TF32) unless TP_CUDA_TF32=1 is set in the
//   environment when the first product runs, which selects CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores, inputs
//   rounded to TF32: about 10 mantissa bits) for every float32 product of the process;
// - float64: CUBLAS_COMPUTE_64F;
// - float16 / bfloat16: inputs of that dtype, float32 accumulation (CUBLAS_COMPUTE_32F), out of that dtype.
// One cublasLtHandle_t per CUDA device, created on first use; a workspace per stream (kMatmulWorkspaceBytes,
// support::StreamScratch); the descriptors, layouts and the heuristic's algorithm cached per (device, dtype,
// transposes, m, n, k, operand alignments), so a training step's products repeat with the same algorithm and
// the same bits. A product cuBLASLt has no algorithm for (an operand's alignment, say) runs on a plain kernel
// (kernels/matmul_fallback.cu).
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "backend/cuda/cublaslt_library.hpp"
#include "backend/cuda/cuda_error.hpp"
#include "backend/cuda/cuda_kernel_support.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_matmul_layout.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda::adapters {

namespace {

// cuBLASLt, loaded by the first product (a failed load throws and is tried again by the next).
const cublaslt::Library& lt() {
  static const cublaslt::Library& library = cublaslt::library();
  return library;
}

// TP_CUDA_TF32=1: float32 products on TF32 tensor cores. Read once.
bool tf32_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TP_CUDA_TF32");  // NOLINT(concurrency-mt-unsafe): read once, at first use
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return enabled;
}

cublasLtHandle_t lt_handle(int ordinal) {
  static std::mutex mutex;
  static std::map<int, cublasLtHandle_t> handles;  // guarded by mutex; kept for the process's lifetime
  const std::lock_guard lock(mutex);
  cublasLtHandle_t& handle = handles[ordinal];
  if (handle == nullptr) check(lt().Create(&handle), "cublasLtCreate");
  return handle;
}

// The largest power of two (at most 256) dividing `address`: the alignment cuBLASLt's heuristic may assume.
std::uint32_t alignment_of(const void* address) {
  const auto bits = reinterpret_cast<std::uintptr_t>(address);
  std::uint32_t alignment = 256;
  while (alignment > 1 && bits % alignment != 0) alignment /= 2;
  return alignment;
}

struct PlanKey {
  int ordinal;
  DType dtype;
  bool transpose_a, transpose_b, tf32;
  std::int64_t m, n, k;
  std::uint32_t align_a, align_b, align_c;
  friend bool operator<(const PlanKey& x, const PlanKey& y) {
    return std::tie(x.ordinal, x.dtype, x.transpose_a, x.transpose_b, x.tf32, x.m, x.n, x.k, x.align_a, x.align_b,
                    x.align_c) < std::tie(y.ordinal, y.dtype, y.transpose_a, y.transpose_b, y.tf32, y.m, y.n, y.k,
                                          y.align_a, y.align_b, y.align_c);
  }
};

// A product's descriptors and algorithm; read-only once built (cuBLASLt reads them from any thread).
class Plan {
 public:
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    // Host-side descriptors (destroyed at exit with the plan cache): a failure is reported, nothing more.
    if (desc != nullptr) report_teardown_failure(lt().MatmulDescDestroy(desc), "cublasLtMatmulDescDestroy");
    for (cublasLtMatrixLayout_t layout : {layout_a, layout_b, layout_c}) {
      if (layout != nullptr) report_teardown_failure(lt().MatrixLayoutDestroy(layout), "cublasLtMatrixLayoutDestroy");
    }
  }

  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_c = nullptr;  // cuBLASLt's A', B', C'
  cublasLtMatmulAlgo_t algo{};
  bool double_scale = false;  // alpha and beta are double (float64), else float
  bool fallback = false;      // cuBLASLt has no algorithm: kernels::launch_matmul_fallback instead
};

cudaDataType data_type(DType dtype) {
  switch (dtype) {
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

cublasLtMatrixLayout_t make_layout(cudaDataType type, const LtOperand& operand) {
  cublasLtMatrixLayout_t layout = nullptr;
  check(lt().MatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(operand.rows),
                                static_cast<std::uint64_t>(operand.cols), operand.ld),
        "cublasLtMatrixLayoutCreate");
  return layout;
}

std::unique_ptr<Plan> build_plan(cublasLtHandle_t handle, const PlanKey& key) {
  auto plan = std::make_unique<Plan>();
  const LtGemm gemm = lt_gemm_of(key.transpose_a, key.transpose_b, key.m, key.n, key.k);
  const cudaDataType type = data_type(key.dtype);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType scale = CUDA_R_32F;
  if (key.dtype == DType::f64) {
    compute = CUBLAS_COMPUTE_64F;
    scale = CUDA_R_64F;
    plan->double_scale = true;
  } else if (key.dtype == DType::f32 && key.tf32) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  check(lt().MatmulDescCreate(&plan->desc, compute, scale), "cublasLtMatmulDescCreate");
  const cublasOperation_t op_a = gemm.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = gemm.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(lt().MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
        "cublasLtMatmulDescSetAttribute(TRANSA)");
  check(lt().MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
        "cublasLtMatmulDescSetAttribute(TRANSB)");
  plan->layout_a = make_layout(type, gemm.a);
  plan->layout_b = make_layout(type, gemm.b);
  plan->layout_c = make_layout(type, gemm.c);

  cublasLtMatmulPreference_t preference = nullptr;
  check(lt().MatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  const std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                        cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      owned(preference, lt().MatmulPreferenceDestroy);
  const std::size_t workspace = support::kMatmulWorkspaceBytes;
  check(lt().MatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                          sizeof(workspace)),
        "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  // cuBLASLt's A' is our b, its B' our a.
  const std::array<std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t>, 4> alignments{{
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c},
  }};
  for (const auto& [attribute, value] : alignments) {
    check(lt().MatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)),
          "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      lt().MatmulAlgoGetHeuristic(handle, plan->desc, plan->layout_a, plan->layout_b, plan->layout_c, plan->layout_c,
                                  preference, 1, &result, &found);
  // No algorithm for this shape and alignment (CUBLAS_STATUS_NOT_SUPPORTED, or none found): the plan says so
  // and the product runs on the fallback kernel.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    plan->fallback = true;
    return plan;
  }
  check(status, "cublasLtMatmulAlgoGetHeuristic");
  plan->algo = result.algo;
  return plan;
}

const Plan& plan_for(cublasLtHandle_t handle, const PlanKey& key) {
  static std::mutex mutex;
  static std::map<PlanKey, std::unique_ptr<Plan>> plans;  // guarded by mutex; entries never move or go away
  const std::lock_guard lock(mutex);
  std::unique_ptr<Plan>& plan = plans[key];
  if (plan == nullptr) plan = build_plan(handle, key);
  return *plan;
}

}  // namespace

void matmul(device::Stream& stream, const MatmulArgs& args) {
  CudaStream& cuda = cuda_stream(stream);
  support::enqueue(stream, [args, &cuda](cudaStream_t native) {
    if (args.m == 0 || args.n == 0) return;
    void* out = args.out.data();
    if (args.k == 0) {  // an empty sum: zeros
      check(cudaMemsetAsync(out, 0, args.out.nbytes(), native), "cudaMemsetAsync (matmul of k = 0)");
      return;
    }
    const void* a = args.a.data();
    const void* b = args.b.data();
    const PlanKey key{cuda.ordinal(),
                      args.a.dtype(),
                      args.transpose_a,
                      args.transpose_b,
                      args.a.dtype() == DType::f32 && tf32_enabled(),
                      args.m,
                      args.n,
                      args.k,
                      alignment_of(a),
                      alignment_of(b),
                      alignment_of(out)};
    const cublasLtHandle_t handle = lt_handle(key.ordinal);
    const Plan& plan = plan_for(handle, key);
    if (plan.fallback) {
      support::check_launch(
          kernels::launch_matmul_fallback(support::kernel_dtype(key.dtype), args.transpose_a, args.transpose_b, a, b,
                                          out, args.m, args.n, args.k, native),
          "launch_matmul_fallback");
      return;
    }
    void* workspace = support::matmul_workspace(support::scratch_of(cuda));
    const float one_f = 1.0F, zero_f = 0.0F;
    const double one_d = 1.0, zero_d = 0.0;
    const void* alpha = plan.double_scale ? static_cast<const void*>(&one_d) : &one_f;
    const void* beta = plan.double_scale ? static_cast<const void*>(&zero_d) : &zero_f;
    // beta = 0: C is not read, so a NaN in out's previous bytes cannot reach the result.
    check(lt().Matmul(handle, plan.desc, alpha, b, plan.layout_a, a, plan.layout_b, beta, out, plan.layout_c, out,
                      plan.layout_c, &plan.algo, workspace, support::kMatmulWorkspaceBytes, native),
          "cublasLtMatmul");
  });
}

}  // namespace tp::backend::cuda::adapters
