// SPDX-License-Identifier: Apache-2.0
// tensorpool._tensorpool.Tensor and DType: tensors to and from numpy and DLPack (python/tensorpool/_tensor.py
// builds constant(), convert_to_tensor() and the dtype names over them).
//
// Host memory is shared, not copied, wherever host code may touch it:
//   - numpy() and __dlpack__ of a tensor whose buffer is host-visible (cpu:0, a device's shared memory) are
//     views whose owner is the Python Tensor, so the tensor outlives every view;
//   - _from_array() borrows a C-contiguous numpy array of a supported dtype: the cpu:0 buffer's memory is the
//     array's, and the buffer holds a reference to the array until the buffer goes.
// Device memory (sim, opencl without shared memory) is copied to the host on the device's stream 0.
// bfloat16 has no numpy dtype (numpy has none and ml_dtypes is no dependency): a bfloat16 tensor comes out of
// numpy() as float32 (widened exactly, a copy), and _from_float32_as_bfloat16 rounds float32 to nearest even.
// DLPack has bfloat16, so __dlpack__ exports it as it is (through nanobind's array object, which implements
// the protocol's keywords).
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "python/bindings.hpp"
#include "python/tensor.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/dtype.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/half.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp::python {
namespace {

constexpr std::array<DType, 8> kAllDTypes = {DType::f32, DType::f16, DType::bf16, DType::f64,
                                             DType::i32, DType::i64, DType::u8,   DType::boolean};
constexpr int kDlpackCpu = 1;  // DLDeviceType kDLCPU

// The Python DType: one object per tp::DType, so `t.dtype is tensorpool.float32`. The module's attributes own
// them (float32, ...); these borrowed handles are set once by bind_dtype.
struct PyDType {
  DType value = DType::f32;
};

std::array<nb::handle, kAllDTypes.size()>
    interned_dtypes;  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

nb::object dtype_object(DType dtype) { return nb::borrow(interned_dtypes[static_cast<std::size_t>(dtype)]); }

// numpy's name for the dtype numpy() returns (bfloat16 comes out as float32, see the header comment).
const char* numpy_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::bf16: return "float32";
    case DType::f16: return "float16";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
    case DType::boolean: return "bool";
  }
  return "float32";
}

nb::dlpack::dtype dlpack_dtype(DType dtype) {
  using nb::dlpack::dtype_code;
  const auto bits = static_cast<std::uint8_t>(size_of(dtype) * 8);
  switch (dtype) {
    case DType::f32:
    case DType::f16:
    case DType::f64: return {static_cast<std::uint8_t>(dtype_code::Float), bits, 1};
    case DType::bf16: return {static_cast<std::uint8_t>(dtype_code::Bfloat), bits, 1};
    case DType::i32:
    case DType::i64: return {static_cast<std::uint8_t>(dtype_code::Int), bits, 1};
    case DType::u8: return {static_cast<std::uint8_t>(dtype_code::UInt), bits, 1};
    case DType::boolean: return {static_cast<std::uint8_t>(dtype_code::Bool), bits, 1};
  }
  return {};
}

std::optional<DType> dtype_from_dlpack(nb::dlpack::dtype dtype) {
  for (const DType each : kAllDTypes) {
    const nb::dlpack::dtype candidate = dlpack_dtype(each);
    if (candidate.code == dtype.code && candidate.bits == dtype.bits && dtype.lanes == 1) return each;
  }
  return std::nullopt;
}

std::vector<std::size_t> extents(const Shape& shape) {
  std::vector<std::size_t> dims;
  for (const std::int64_t dim : shape.dims()) dims.push_back(static_cast<std::size_t>(dim));
  return dims;
}

nb::tuple shape_tuple(const Shape& shape) {
  nb::list dims;
  for (const std::int64_t dim : shape.dims()) dims.append(dim);
  return nb::tuple(dims);
}

// One numpy array's memory lent to one Buffer: allocate() hands out the array's address, once, and the
// resource holds a reference to the array until the buffer gives the memory back. The address is aligned as
// the array is (to its element size at least), not to kDefaultAlignment.
class BorrowedArrayResource final : public memory::MemoryResource {
 public:
  BorrowedArrayResource(nb::handle array, void* data, std::size_t bytes)
      : MemoryResource("numpy"), array_(array.inc_ref().ptr()), data_(data), bytes_(bytes) {}
  ~BorrowedArrayResource() override { release(); }
  BorrowedArrayResource(const BorrowedArrayResource&) = delete;
  BorrowedArrayResource& operator=(const BorrowedArrayResource&) = delete;

 private:
  void* do_allocate(std::size_t bytes, std::size_t /*alignment*/, const memory::AllocationTag& tag) override {
    if (bytes != bytes_ || handed_out_) {
      TP_THROW(InvalidArgument, "python", "a borrowed numpy array of ", bytes_, " bytes cannot serve ", bytes,
               " bytes for ", tag.describe(), "; it backs exactly one tensor of its own size");
    }
    handed_out_ = true;
    return data_;
  }
  void do_deallocate(void* /*ptr*/, std::size_t /*bytes*/) noexcept override { release(); }
  memory::MemoryStats do_stats() const override {
    memory::MemoryStats stats;
    stats.bytes_in_use = array_ != nullptr ? bytes_ : 0;
    stats.bytes_requested = stats.bytes_in_use;
    stats.num_allocs = handed_out_ ? 1 : 0;
    return stats;
  }

  static int decref_later(void* array) {
    Py_DECREF(static_cast<PyObject*>(array));
    return 0;
  }

  // Drops the array reference. The last holder of the buffer may be a stream's thread without the GIL: then the
  // interpreter's main thread drops it at its next chance (Py_AddPendingCall needs no GIL). Once the
  // interpreter is finalising, the reference is left (the process is ending).
  void release() noexcept {
    PyObject* array = std::exchange(array_, nullptr);
    if (array == nullptr || Py_IsInitialized() == 0 || interpreter_finalizing()) return;
    if (PyGILState_Check() != 0) {
      Py_DECREF(array);
    } else {
      static_cast<void>(Py_AddPendingCall(&decref_later, array));  // a full queue leaks it rather than blocks
    }
  }

  static bool interpreter_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
  }

  PyObject* array_;  // owned reference; null once released
  void* const data_;
  const std::size_t bytes_;
  bool handed_out_ = false;
};

device::Device& host_device() { return device::DeviceManager::instance().device("cpu:0"); }

memory::AllocationTag numpy_tag(const Shape& shape, DType dtype) {
  memory::AllocationTag tag;
  tag.name = "numpy";
  tag.op = "convert_to_tensor";
  tag.shape = shape.dims_vector();
  tag.dtype = std::string(name_of(dtype));
  return tag;
}

// A numpy array (or another array nanobind reads: buffer protocol, DLPack) on the host.
using HostArray = nb::ndarray<nb::ro, nb::device::cpu>;

// The array's shape; a ValueError unless its elements lie in C order without gaps (strides of extent-1 axes
// and of empty arrays do not matter).
Shape checked_c_contiguous_shape(const HostArray& array) {
  std::vector<std::int64_t> dims(array.ndim());
  for (std::size_t axis = 0; axis < array.ndim(); ++axis) dims[axis] = static_cast<std::int64_t>(array.shape(axis));
  if (array.size() == 0) return Shape(dims);
  std::int64_t expected_stride = 1;
  for (std::size_t axis = array.ndim(); axis-- > 0;) {
    if (dims[axis] > 1 && array.stride(axis) != expected_stride) {
      throw nb::value_error("value: the array is not C-contiguous; pass numpy.ascontiguousarray(value)");
    }
    expected_stride *= dims[axis];
  }
  return Shape(dims);
}

// A cpu:0 tensor over `source`'s memory (see the header comment).
PyTensor from_array(nb::handle source, bool readonly) {
  const auto array = nb::cast<HostArray>(source);
  const std::optional<DType> dtype = dtype_from_dlpack(array.dtype());
  if (!dtype) {
    throw nb::type_error(
        "value: unsupported element type; use float32, float16, float64, int32, int64, uint8 or bool (bfloat16 "
        "from float32 through dtype=tensorpool.bfloat16)");
  }
  const Shape shape = checked_c_contiguous_shape(array);
  const std::size_t bytes = byte_size(shape, *dtype);
  device::Device& device = host_device();
  if (bytes == 0) return PyTensor{Tensor::empty(shape, *dtype, device, TensorTag{.name = "numpy"}), readonly};
  auto resource = std::make_shared<BorrowedArrayResource>(source, const_cast<void*>(array.data()), bytes);
  std::shared_ptr<Buffer> buffer = device.allocate(bytes, numpy_tag(shape, *dtype), std::move(resource));
  return PyTensor{Tensor::from_buffer(std::move(buffer), 0, shape, *dtype), readonly};
}

PyTensor bfloat16_from_float32(const nb::ndarray<const float, nb::ro, nb::c_contig, nb::device::cpu>& array) {
  std::vector<std::int64_t> dims;
  for (std::size_t axis = 0; axis < array.ndim(); ++axis) dims.push_back(static_cast<std::int64_t>(array.shape(axis)));
  const Shape shape(dims);
  Tensor tensor = Tensor::empty(shape, DType::bf16, host_device(), TensorTag{.name = "numpy"});
  if (tensor.num_elements() > 0) {
    BFloat16* out = tensor.data<BFloat16>();
    const float* in = array.data();
    for (std::int64_t i = 0; i < tensor.num_elements(); ++i) out[i] = BFloat16::from_float(in[i]);
  }
  return PyTensor{std::move(tensor), false};
}

bool host_visible(const Tensor& tensor) { return tensor.buffer()->host_visible(); }

// Host memory holding a copy of the tensor's elements, freed with its capsule.
std::pair<std::byte*, nb::capsule> host_copy(const Tensor& tensor) {
  auto* bytes = new std::byte[tensor.nbytes()];
  nb::capsule owner(bytes, [](void* pointer) noexcept { delete[] static_cast<std::byte*>(pointer); });
  {
    nb::gil_scoped_release release;
    tensor.copy_to_host(bytes);
  }
  return {bytes, std::move(owner)};
}

// The host address of a host-visible tensor, once the device's enqueued work on it is done.
void* host_address(const Tensor& tensor) {
  if (!tensor.device().host_accessible()) {
    nb::gil_scoped_release release;
    tensor.device().synchronize();
  }
  return tensor.data();
}

template <typename... Framework>
nb::object wrap(void* data, const Shape& shape, DType dtype, nb::handle owner, bool readonly) {
  const std::vector<std::size_t> dims = extents(shape);
  if (readonly) {
    return nb::cast(nb::ndarray<Framework..., nb::ro>(data, dims.size(), dims.data(), owner, nullptr,
                                                      dlpack_dtype(dtype), kDlpackCpu));
  }
  return nb::cast(
      nb::ndarray<Framework...>(data, dims.size(), dims.data(), owner, nullptr, dlpack_dtype(dtype), kDlpackCpu));
}

nb::object numpy_empty(const Shape& shape, DType dtype) {
  return nb::module_::import_("numpy").attr("empty")(shape_tuple(shape), numpy_name(dtype));
}

nb::object to_numpy(nb::handle self) {
  const auto& value = nb::cast<const PyTensor&>(self);
  const Tensor& tensor = value.tensor;
  if (tensor.num_elements() == 0) return numpy_empty(tensor.shape(), tensor.dtype());
  if (tensor.dtype() == DType::bf16) {
    nb::object out = numpy_empty(tensor.shape(), DType::f32);
    auto floats = nb::cast<nb::ndarray<float, nb::c_contig>>(out);
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(tensor.num_elements()));
    if (host_visible(tensor)) {
      std::memcpy(bits.data(), host_address(tensor), tensor.nbytes());
    } else {
      nb::gil_scoped_release release;
      tensor.copy_to_host(bits.data());
    }
    for (std::size_t i = 0; i < bits.size(); ++i) floats.data()[i] = bfloat16_bits_to_float(bits[i]);
    return out;
  }
  if (host_visible(tensor)) {
    return wrap<nb::numpy>(host_address(tensor), tensor.shape(), tensor.dtype(), self, value.readonly);
  }
  auto [bytes, owner] = host_copy(tensor);
  return wrap<nb::numpy>(bytes, tensor.shape(), tensor.dtype(), owner, false);
}

// __dlpack__(stream=None, max_version=None, dl_device=None, copy=None): host-visible tensors export a view;
// device tensors a host copy, unless copy=False (BufferError, as the protocol asks).
nb::object to_dlpack(nb::handle self, const nb::kwargs& kwargs) {
  const auto& value = nb::cast<const PyTensor&>(self);
  const Tensor& tensor = value.tensor;
  nb::object copy = nb::none();
  if (kwargs.contains("copy")) {
    copy = kwargs["copy"];
    nb::del(kwargs["copy"]);
  }
  const bool must_copy = !copy.is_none() && nb::cast<bool>(copy);
  nb::object exported;
  if (host_visible(tensor) && !must_copy) {
    void* data = tensor.num_elements() > 0 ? host_address(tensor) : nullptr;
    exported = wrap<nb::array_api>(data, tensor.shape(), tensor.dtype(), self, value.readonly);
  } else if (!copy.is_none() && !must_copy) {
    throw nb::buffer_error(("__dlpack__(copy=False): the tensor lives in " + tensor.device().name() +
                            " memory, which host code cannot read in place; pass copy=None or True")
                               .c_str());
  } else {
    auto [bytes, owner] = host_copy(tensor);
    exported = wrap<nb::array_api>(bytes, tensor.shape(), tensor.dtype(), owner, false);
  }
  return exported.attr("__dlpack__")(**kwargs);
}

nb::object to_array(nb::handle self, nb::handle dtype, nb::handle copy) {
  const auto& value = nb::cast<const PyTensor&>(self);
  const bool copies = value.tensor.dtype() == DType::bf16 || !host_visible(value.tensor);
  if (!copy.is_none() && !nb::cast<bool>(copy) && copies) {
    throw nb::value_error(
        "__array__(copy=False): this tensor's elements reach numpy only as a copy (device memory "
        "or bfloat16); pass copy=None");
  }
  nb::object array = to_numpy(self);
  if (!dtype.is_none()) array = array.attr("astype")(dtype, nb::arg("copy") = false);
  if (!copy.is_none() && nb::cast<bool>(copy) && !copies) array = array.attr("copy")();
  return array;
}

Shape shape_from(const std::vector<std::int64_t>& dims) {
  for (const std::int64_t dim : dims) {
    if (dim < 0) throw nb::value_error("shape: dimensions must be >= 0 (-1 is not inferred here)");
  }
  return Shape(dims);
}

void bind_dtype(nb::module_& module) {
  nb::class_<PyDType>(module, "DType", "A tensor element type (tensorpool.float32, ...): .name, .size, .as_numpy_dtype")
      .def_prop_ro("name", [](const PyDType& self) { return std::string(name_of(self.value)); })
      .def_prop_ro("size", [](const PyDType& self) { return size_of(self.value); })
      .def_prop_ro("is_floating", [](const PyDType& self) { return is_floating(self.value); })
      .def_prop_ro("is_integer",
                   [](const PyDType& self) {
                     return self.value == DType::i32 || self.value == DType::i64 || self.value == DType::u8;
                   })
      .def_prop_ro("is_bool", [](const PyDType& self) { return self.value == DType::boolean; })
      .def_prop_ro(
          "as_numpy_dtype",
          [](const PyDType& self) { return nb::module_::import_("numpy").attr(numpy_name(self.value)); },
          "numpy's scalar type for this dtype (numpy.float32 for bfloat16, which numpy lacks)")
      .def("__repr__", [](const PyDType& self) { return "tensorpool." + std::string(name_of(self.value)); })
      .def("__str__", [](const PyDType& self) { return "<dtype: '" + std::string(name_of(self.value)) + "'>"; })
      .def("__hash__", [](const PyDType& self) { return nb::hash(nb::str(name_of(self.value).data())); })
      .def("__eq__",
           [](const PyDType& self, nb::handle other) -> nb::object {
             PyDType other_dtype;
             if (nb::try_cast(other, other_dtype)) return nb::bool_(other_dtype.value == self.value);
             if (nb::isinstance<nb::str>(other)) {
               try {
                 return nb::bool_(parse_dtype(nb::cast<std::string>(other)) == self.value);
               } catch (const InvalidArgument&) {
                 return nb::bool_(false);
               }
             }
             return nb::borrow(Py_NotImplemented);
           })
      .def("__ne__", [](nb::handle self, nb::handle other) {
        nb::object equal = self.attr("__eq__")(other);
        return equal.is(nb::borrow(Py_NotImplemented)) ? equal : nb::bool_(!nb::cast<bool>(equal));
      });
  for (const DType each : kAllDTypes) {
    nb::object object = nb::cast(PyDType{each});
    interned_dtypes[static_cast<std::size_t>(each)] = object;
    module.attr(name_of(each).data()) = object;
  }
  module.def(
      "dtype_from_name", [](const std::string& name) { return dtype_object(parse_dtype(name)); }, nb::arg("name"),
      "The DType named `name` (float32 or f32, ...); InvalidArgumentError listing the names otherwise");
}

}  // namespace

void bind_tensor(nb::module_& module) {
  bind_dtype(module);
  nb::class_<PyTensor>(module, "Tensor",
                       "A tensor of the runtime: numpy() / __array__ / __dlpack__ share host memory without copies")
      .def_prop_ro("shape", [](const PyTensor& self) { return shape_tuple(self.tensor.shape()); })
      .def_prop_ro("ndim", [](const PyTensor& self) { return self.tensor.shape().rank(); })
      .def_prop_ro("size", [](const PyTensor& self) { return self.tensor.num_elements(); })
      .def_prop_ro("nbytes", [](const PyTensor& self) { return self.tensor.nbytes(); })
      .def_prop_ro("dtype", [](const PyTensor& self) { return dtype_object(self.tensor.dtype()); })
      .def_prop_ro("device", [](const PyTensor& self) { return self.tensor.device().name(); })
      .def_prop_ro(
          "shares_host_memory", [](const PyTensor& self) { return host_visible(self.tensor); },
          "Whether numpy() and __dlpack__ view the tensor's memory (True) or copy it from the device (False)")
      .def("numpy", &to_numpy,
           "The elements as a numpy array: a view for host memory (it keeps the tensor alive), else a copy")
      .def("__array__", &to_array, nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none())
      .def("__dlpack__", &to_dlpack)
      .def("__dlpack_device__", [](const PyTensor&) { return nb::make_tuple(kDlpackCpu, 0); })
      .def("__len__",
           [](const PyTensor& self) {
             if (self.tensor.shape().rank() == 0) throw nb::type_error("len() of a scalar (rank-0) tensor");
             return self.tensor.shape().dim(0);
           })
      .def("__float__", [](nb::handle self) { return nb::float_(self.attr("numpy")()); })
      .def("__int__", [](nb::handle self) { return nb::int_(self.attr("numpy")()); })
      .def("__bool__", [](nb::handle self) { return nb::cast<bool>(self.attr("numpy")().attr("__bool__")()); })
      .def(
          "reshape",
          [](const PyTensor& self, const std::vector<std::int64_t>& shape) {
            return PyTensor{self.tensor.reshape(shape_from(shape)), self.readonly};
          },
          nb::arg("shape"), "A view of the same elements with a new shape")
      .def(
          "to",
          [](const PyTensor& self, const std::string& device) {
            device::Device& target = device::DeviceManager::instance().device(device);
            nb::gil_scoped_release release;
            return PyTensor{self.tensor.to(target), false};
          },
          nb::arg("device"), "A copy on `device` (\"cpu:0\", \"sim:1\", ...)")
      .def("__repr__",
           [](nb::handle self) {
             const auto& value = nb::cast<const PyTensor&>(self);
             const std::string numpy = nb::cast<std::string>(nb::repr(self.attr("numpy")()));
             return "<tensorpool.Tensor: shape=" + nb::cast<std::string>(nb::repr(shape_tuple(value.tensor.shape()))) +
                    ", dtype=" + std::string(name_of(value.tensor.dtype())) +
                    ", device=" + value.tensor.device().name() + ", numpy=" + numpy + ">";
           })
      .def_static("_from_array", &from_array, nb::arg("array"), nb::arg("readonly"),
                  "A cpu:0 tensor borrowing a C-contiguous host array of a supported dtype (no copy)")
      .def_static("_from_float32_as_bfloat16", &bfloat16_from_float32, nb::arg("array"),
                  "A cpu:0 bfloat16 tensor from float32 values, rounded to nearest even");
}

}  // namespace tp::python
