// SPDX-License-Identifier: Apache-2.0
// MatMul: float32 and float64 through CLBlast's GEMM (row-major, transposes by flag, buffer offsets in
// elements); float16 and bfloat16 through kernels/matmul.cl, which follows the CPU's matmul_half (operands
// widened to float32 as they are read, products summed in float32, the result rounded once to the 16-bit
// dtype). No launch here allocates device memory: a product uses only its operands' and result's buffers, so
// a step's memory plan covers every matmul. CLBlast compiles its kernels on the first call per device and
// caches them (and PoCL caches the binaries on disk).
#include <clblast_c.h>

#include <array>
#include <mutex>
#include <string>

#include "backend/opencl/opencl_kernel_support.hpp"
#include "backend/opencl/opencl_kernels.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::opencl::kernels {

namespace {

// CLBlast returns OpenCL's codes as they are and its own below -1000.
void check_clblast(CLBlastStatusCode status, std::string_view routine) {
  if (status == CLBlastSuccess) return;
  const auto code = static_cast<cl_int>(status);
  if (code > -1000) check(code, routine);
  TP_THROW(
      DeviceError, kComponent, routine, " failed: CLBlast status ", code,
      code == CLBlastInsufficientMemoryA || code == CLBlastInsufficientMemoryB || code == CLBlastInsufficientMemoryC
          ? " (a matrix's buffer is smaller than its offset and size)"
      : code == CLBlastNoDoublePrecision    ? " (the device has no float64)"
      : code == CLBlastInvalidLocalMemUsage ? " (not enough local memory on this device)"
                                            : " (see CLBlast's clblast_c.h)");
}

// A matrix operand's position in its buffer, in elements of `element_bytes`.
std::size_t element_offset(const DeviceSpan& span, std::size_t element_bytes) {
  if (span.offset % element_bytes != 0) {
    TP_THROW(DeviceError, kComponent, "matmul: a byte offset of ", span.offset, " is not a multiple of the ",
             element_bytes, "-byte element");
  }
  return span.offset / element_bytes;
}

// CLBlast before 1.6.1 (Debian 12 ships 1.5.2) races on its kernel and database caches when two threads call
// it at once (CNugteren/CLBlast#486, fixed by #495): two devices' streams then fail with status -2039 or crash.
// Every call goes through this lock; a call only enqueues, so the lock is held for microseconds once CLBlast
// has compiled its kernels.
std::mutex& clblast_mutex() {
  static std::mutex mutex;
  return mutex;
}

struct Gemm {
  bool transpose_a, transpose_b;
  std::size_t m, n, k;
};

// C[m, n] = op(A) op(B) in T (float or double), row-major. C is zeroed first so that CLBlast's beta = 0 cannot
// carry a NaN from C's previous bytes into the result.
template <typename T>
void gemm(LaunchContext& context, const Gemm& shape, const DeviceSpan& a, const DeviceSpan& b, const DeviceSpan& c) {
  const T zero{0};
  fill_bytes(context, c, &zero, sizeof(T), shape.m * shape.n * sizeof(T));
  const CLBlastTranspose transpose_a = shape.transpose_a ? CLBlastTransposeYes : CLBlastTransposeNo;
  const CLBlastTranspose transpose_b = shape.transpose_b ? CLBlastTransposeYes : CLBlastTransposeNo;
  const std::size_t a_ld = shape.transpose_a ? shape.m : shape.k;  // A is stored [m, k], or [k, m] transposed
  const std::size_t b_ld = shape.transpose_b ? shape.k : shape.n;  // B is stored [k, n], or [n, k] transposed
  cl_command_queue queue = context.queue();
  const std::lock_guard lock(clblast_mutex());
  if constexpr (sizeof(T) == sizeof(float)) {
    check_clblast(CLBlastSgemm(CLBlastLayoutRowMajor, transpose_a, transpose_b, shape.m, shape.n, shape.k, 1.0F,
                               a.buffer, element_offset(a, sizeof(T)), a_ld, b.buffer, element_offset(b, sizeof(T)),
                               b_ld, 0.0F, c.buffer, element_offset(c, sizeof(T)), shape.n, &queue, nullptr),
                  "CLBlastSgemm");
  } else {
    check_clblast(CLBlastDgemm(CLBlastLayoutRowMajor, transpose_a, transpose_b, shape.m, shape.n, shape.k, 1.0,
                               a.buffer, element_offset(a, sizeof(T)), a_ld, b.buffer, element_offset(b, sizeof(T)),
                               b_ld, 0.0, c.buffer, element_offset(c, sizeof(T)), shape.n, &queue, nullptr),
                  "CLBlastDgemm");
  }
}

// The work-group side of the 16-bit product: the largest of matmul.cl's tiles whose TILE x TILE work-group the
// device allows for its kernel, and that kernel.
struct HalfKernel {
  cl_kernel kernel;
  std::size_t tile;
};

HalfKernel half_kernel(LaunchContext& context, DType dtype) {
  cl_device_id device = nullptr;
  // NOLINTNEXTLINE(bugprone-sizeof-expression): cl_device_id is an opaque handle; its own size is asked for
  check(clGetCommandQueueInfo(context.queue(), CL_QUEUE_DEVICE, sizeof(device), &device, nullptr),
        "clGetCommandQueueInfo(CL_QUEUE_DEVICE)");
  std::array<std::size_t, 3> item_sizes{1, 1, 1};
  check(clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof(item_sizes), item_sizes.data(), nullptr),
        "clGetDeviceInfo(CL_DEVICE_MAX_WORK_ITEM_SIZES)");
  for (const std::size_t tile : {std::size_t{16}, std::size_t{8}, std::size_t{1}}) {
    std::string name = "matmul_" + std::to_string(tile);
    cl_kernel kernel = context.kernel("matmul", kernel_name(name, dtype));
    std::size_t allowed = 0;
    check(clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(allowed), &allowed, nullptr),
          "clGetKernelWorkGroupInfo(CL_KERNEL_WORK_GROUP_SIZE)");
    if (tile == 1 || (allowed >= tile * tile && item_sizes[0] >= tile && item_sizes[1] >= tile)) {
      return {kernel, tile};
    }
  }
  return {nullptr, 0};  // not reached: a 1 x 1 work-group is always allowed
}

// C[m, n] = op(A) op(B) in float16 or bfloat16 (m, n, k > 0): TILE x TILE work-groups over C's columns
// (dimension 0) and rows (dimension 1), each work-item computing a 4 x 4 block of C.
void gemm_half(LaunchContext& context, DType dtype, const Gemm& shape, const DeviceSpan& a, const DeviceSpan& b,
               const DeviceSpan& c) {
  const HalfKernel chosen = half_kernel(context, dtype);
  KernelArguments(chosen.kernel)
      .span(a)
      .span(b)
      .span(c)
      .value(static_cast<cl_ulong>(shape.m))
      .value(static_cast<cl_ulong>(shape.n))
      .value(static_cast<cl_ulong>(shape.k))
      .value(static_cast<cl_uint>(shape.transpose_a ? 1 : 0))
      .value(static_cast<cl_uint>(shape.transpose_b ? 1 : 0));
  const std::size_t tile = chosen.tile;
  const std::size_t block = 4 * tile;  // of C, per work-group
  const std::array<std::size_t, 2> local{tile, tile};
  const std::array<std::size_t, 2> global{(shape.n + block - 1) / block * tile, (shape.m + block - 1) / block * tile};
  check(clEnqueueNDRangeKernel(context.queue(), chosen.kernel, 2, nullptr, global.data(), local.data(), 0, nullptr,
                               nullptr),
        "clEnqueueNDRangeKernel(matmul)");
}

bool is_half(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

}  // namespace

void matmul(device::Stream& stream, const MatmulArgs& args) {
  const Gemm shape{args.transpose_a, args.transpose_b, static_cast<std::size_t>(args.m),
                   static_cast<std::size_t>(args.n), static_cast<std::size_t>(args.k)};
  const DType dtype = args.a.dtype();
  enqueue(stream, [args, shape, dtype](LaunchContext& context) {
    require_fp64(context, "matmul", dtype);
    if (shape.m * shape.n == 0) return;
    const DeviceSpan out = context.span(args.out);
    if (shape.k == 0) {  // an empty sum: zeros
      const std::uint64_t zero = 0;
      const std::size_t element = size_of(dtype);
      fill_bytes(context, out, &zero, element, shape.m * shape.n * element);
      return;
    }
    if (!is_half(dtype)) {
      if (dtype == DType::f64) {
        gemm<cl_double>(context, shape, context.span(args.a), context.span(args.b), out);
      } else {
        gemm<cl_float>(context, shape, context.span(args.a), context.span(args.b), out);
      }
      return;
    }
    gemm_half(context, dtype, shape, context.span(args.a), context.span(args.b), out);
  });
}

}  // namespace tp::backend::opencl::kernels
