#include "tensorpool/ops/broadcast.hpp"

#include <vector>

#include "backend/cpu/kernels/broadcast.hpp"
#include "ops/op_support.hpp"

namespace tp::ops {

namespace {

constexpr std::string_view kBroadcast = "BroadcastAxis";
constexpr std::string_view kScaleRows = "ScaleRows";

// out viewed as [outer, axis, inner] around the inserted axis, which must be in range for out's rank.
struct InsertedAxis {
  std::int64_t outer = 1, axis = 1, inner = 1;
  Shape reduced;  // out's shape without the axis: what x must be
};

std::int64_t normalized_axis(std::int64_t axis, std::int64_t out_rank, const Shape& x_shape) {
  if (axis < -out_rank || axis >= out_rank) {
    TP_THROW(InvalidArgument, "ops", kBroadcast, ": axis ", axis, " is out of range for inserting an axis into x ",
             x_shape, " (valid axes are ", -out_rank, "..", out_rank - 1, ")");
  }
  return axis < 0 ? axis + out_rank : axis;
}

InsertedAxis split_out(const Tensor& x, std::int64_t axis, const Tensor& out) {
  const auto rank = static_cast<std::int64_t>(out.shape().rank());
  axis = normalized_axis(axis, rank, x.shape());
  InsertedAxis split;
  std::vector<std::int64_t> kept;
  for (std::int64_t dim = 0; dim < rank; ++dim) {
    const std::int64_t size = out.shape().dim(dim);
    if (dim < axis) split.outer *= size;
    if (dim == axis) split.axis = size;
    if (dim > axis) split.inner *= size;
    if (dim != axis) kept.push_back(size);
  }
  split.reduced = Shape(std::move(kept));
  return split;
}

}  // namespace

void broadcast_axis_into(const Tensor& x, std::int64_t axis, const Tensor& out, BroadcastMode mode,
                         const OpContext& context) {
  device::Device& device = detail::common_device(kBroadcast, {{"x", x}, {"out", out}});
  detail::require_floating(kBroadcast, {"x", x});
  detail::require_same_dtype(kBroadcast, {"x", x}, {"out", out});
  if (out.shape().rank() != x.shape().rank() + 1) {
    TP_THROW(InvalidArgument, "ops", kBroadcast, ": out ", out.shape(), " must have one more axis than x ",
             x.shape());
  }
  const InsertedAxis split = split_out(x, axis, out);
  if (x.shape() != split.reduced) {
    TP_THROW(InvalidArgument, "ops", kBroadcast, ": x ", x.shape(), " does not match out ", out.shape(),
             " without axis ", axis, " (", split.reduced, ")");
  }
  device::Stream& stream = detail::stream_for(kBroadcast, device, context);
  detail::dispatch_floating(x.dtype(), [&]<typename T>(T) {
    // The mean of an empty axis writes nothing, so its 1 / 0 is never used.
    const T alpha = mode == BroadcastMode::mean && split.axis > 0 ? T{1} / static_cast<T>(split.axis) : T{1};
    stream.enqueue([x, out, split, alpha] {
      backend::cpu::broadcast_axis<T>(x.data<T>(), out.data<T>(), split.outer, split.axis, split.inner, alpha);
    });
  });
}

Tensor broadcast_axis(const Tensor& x, std::int64_t axis, std::int64_t size, BroadcastMode mode,
                      const OpContext& context) {
  device::Device& device = detail::common_device(kBroadcast, {{"x", x}});
  detail::require_floating(kBroadcast, {"x", x});
  if (size < 0) TP_THROW(InvalidArgument, "ops", kBroadcast, ": size ", size, " is negative");
  const auto out_rank = static_cast<std::int64_t>(x.shape().rank()) + 1;
  const std::int64_t position = normalized_axis(axis, out_rank, x.shape());
  std::vector<std::int64_t> dims = x.shape().dims();
  dims.insert(dims.begin() + position, size);
  Tensor out = detail::allocate_output(kBroadcast, Shape(std::move(dims)), x.dtype(), device, context);
  broadcast_axis_into(x, axis, out, mode, context);
  return out;
}

void scale_rows_into(const Tensor& x, const Tensor& s, const Tensor& out, const OpContext& context) {
  device::Device& device = detail::common_device(kScaleRows, {{"x", x}, {"s", s}, {"out", out}});
  detail::require_rank(kScaleRows, {"x", x}, 2);
  detail::require_floating(kScaleRows, {"x", x});
  detail::require_same_dtype(kScaleRows, {"x", x}, {"s", s});
  detail::require_same_dtype(kScaleRows, {"x", x}, {"out", out});
  detail::require_shape(kScaleRows, {"s", s}, Shape{x.shape().dim(0)});
  detail::require_shape(kScaleRows, {"out", out}, x.shape());
  device::Stream& stream = detail::stream_for(kScaleRows, device, context);
  detail::dispatch_floating(x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x, s, out] {
      backend::cpu::scale_rows<T>(x.data<T>(), s.data<T>(), out.data<T>(), x.shape().dim(0), x.shape().dim(1));
    });
  });
}

Tensor scale_rows(const Tensor& x, const Tensor& s, const OpContext& context) {
  device::Device& device = detail::common_device(kScaleRows, {{"x", x}, {"s", s}});
  detail::require_floating(kScaleRows, {"x", x});
  Tensor out = detail::allocate_output(kScaleRows, x.shape(), x.dtype(), device, context);
  scale_rows_into(x, s, out, context);
  return out;
}

}  // namespace tp::ops
