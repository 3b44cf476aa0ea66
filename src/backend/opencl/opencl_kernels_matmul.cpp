// MatMul through CLBlast's GEMM (row-major, transposes by flag, buffer offsets in elements). float16 and bfloat16
// follow the CPU's matmul_half: operands widened to float32 temporaries on the device, SGEMM (products
// accumulated in float32), the result rounded once to the 16-bit dtype. CLBlast compiles its kernels on the
// first call per device and caches them (and PoCL caches the binaries on disk).
#include <clblast_c.h>

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
  TP_THROW(DeviceError, kComponent, routine, " failed: CLBlast status ", code,
           code == CLBlastInsufficientMemoryA || code == CLBlastInsufficientMemoryB ||
                   code == CLBlastInsufficientMemoryC
               ? " (a matrix's buffer is smaller than its offset and size)"
           : code == CLBlastNoDoublePrecision ? " (the device has no float64)"
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

// Converts `count` elements with elementwise.cl's cast_<from>_<to>.
void convert(LaunchContext& context, DType from, DType to, const DeviceSpan& source, const DeviceSpan& target,
             std::size_t count) {
  std::string name = "cast_";
  name += dtype_suffix(from);
  name += '_';
  name += dtype_suffix(to);
  cl_kernel kernel = context.kernel("elementwise", name);
  KernelArguments(kernel).span(source).span(target).value(static_cast<cl_ulong>(count));
  launch_items(context, kernel, count);
}

bool is_half(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

}  // namespace

void matmul(device::Stream& stream, const MatmulArgs& args) {
  const Gemm shape{args.transpose_a, args.transpose_b, static_cast<std::size_t>(args.m),
                   static_cast<std::size_t>(args.n), static_cast<std::size_t>(args.k)};
  const DType dtype = args.a.dtype();
  // The float32 operands of a 16-bit product, allocated here (on the calling thread, from the device's memory
  // stack) and held by the launch until its commands complete.
  Tensor a32, b32, c32;
  if (is_half(dtype) && shape.m * shape.n * shape.k > 0) {
    const TensorTag tag{.name = "matmul float32 operand", .kind = memory::AllocationKind::temporary, .op = "MatMul"};
    a32 = Tensor::empty(Shape{args.m, args.k}, DType::f32, stream.device(), tag);
    b32 = Tensor::empty(Shape{args.k, args.n}, DType::f32, stream.device(), tag);
    c32 = Tensor::empty(Shape{args.m, args.n}, DType::f32, stream.device(), tag);
  }
  enqueue(stream, [args, shape, dtype, a32, b32, c32](LaunchContext& context) {
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
    const DeviceSpan a = context.span(a32);
    const DeviceSpan b = context.span(b32);
    const DeviceSpan c = context.span(c32);
    convert(context, dtype, DType::f32, context.span(args.a), a, shape.m * shape.k);
    convert(context, dtype, DType::f32, context.span(args.b), b, shape.k * shape.n);
    gemm<cl_float>(context, shape, a, b, c);
    convert(context, DType::f32, dtype, c, out, shape.m * shape.n);
  });
}

}  // namespace tp::backend::opencl::kernels
