// SPDX-License-Identifier: Apache-2.0
// The translator from the runtime's typed errors to tensorpool.errors' classes (python/tensorpool/errors.py):
// tp::InvalidArgument -> InvalidArgumentError (a ValueError), tp::OutOfMemoryError -> ResourceExhaustedError (a
// MemoryError) with the report's fields as attributes, any other tp::Error -> InternalError (a RuntimeError).
// The classes are Python's (so they subclass the built-ins and pickle like any exception); the translator looks
// them up in tensorpool.errors when an error crosses, which the package imports right after the extension.
#include <nanobind/stl/string.h>

#include <cstddef>
#include <exception>
#include <string>
#include <vector>

#include "python/errors.hpp"

#include "python/bindings.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/memory/allocation_tag.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/report/oom_advice.hpp"

namespace tp::python {
namespace {

// The cause out_of_memory_error.cpp's render() names, in the order it tests them.
const char* cause_of(const OutOfMemoryReport& report) {
  if (report.exceeds_limit()) return "exceeds_limit";
  if (report.is_fragmentation()) return "fragmentation";
  if (report.in_use_bytes == 0) return "held_elsewhere";
  return "shortage";
}

nb::object text_or_none(const std::string& text) { return text.empty() ? nb::none() : nb::cast(text); }

nb::dict tag_dict(const memory::AllocationTag& tag) {
  nb::dict row;
  row["name"] = tag.name;
  row["op"] = tag.op;
  row["kind"] = std::string(memory::to_string(tag.kind));
  nb::list shape;
  for (const std::int64_t dim : tag.shape) shape.append(dim);
  row["shape"] = shape;
  row["dtype"] = tag.dtype;
  row["step"] = tag.step;
  return row;
}

nb::dict report_fields(const OutOfMemoryReport& report) {
  nb::dict fields;
  fields["tensor"] = text_or_none(report.request_tag.name);
  fields["tensor_kind"] = std::string(memory::to_string(report.request_tag.kind));
  fields["device"] = text_or_none(report.device);
  fields["allocator"] = text_or_none(report.allocator);
  fields["requested_bytes"] = report.requested_bytes;
  fields["rounded_bytes"] = report.rounded_bytes;
  fields["limit_bytes"] = report.limit_bytes ? nb::cast(*report.limit_bytes) : nb::none();
  fields["in_use_bytes"] = report.in_use_bytes;
  fields["reserved_bytes"] = report.reserved_bytes;
  fields["free_bytes"] = report.free_bytes();
  const memory::Fragmentation fragmentation = report.fragmentation();
  fields["largest_free_block"] = fragmentation.largest_free_block;
  fields["fragmentation"] = fragmentation.external;
  fields["internal_fragmentation_bytes"] =
      fragmentation.internal_bytes ? nb::cast(*fragmentation.internal_bytes) : nb::none();
  fields["cause"] = cause_of(report);
  fields["suggestion"] = text_or_none(report.suggestion);
  nb::list live;
  for (const LiveAllocation& allocation : report.largest_live) {
    nb::dict row = tag_dict(allocation.tag);
    row["bytes"] = allocation.bytes;
    live.append(row);
  }
  fields["live_tensors"] = live;
  return fields;
}

// Raises `instance` (an exception object) as the pending Python error.
void raise(const nb::object& instance) {
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance.ptr());
}

// Raises tensorpool.errors.`class_name`(message); when the package's module cannot be imported (the extension
// used on its own), the built-in `fallback` with the same message, so no error is ever lost.
void raise_class(const char* class_name, PyObject* fallback, const char* message) {
  try {
    const nb::object errors = nb::module_::import_("tensorpool.errors");
    raise(errors.attr(class_name)(message));
  } catch (const nb::python_error&) {
    PyErr_SetString(fallback, message);
  }
}

void raise_out_of_memory(const OutOfMemoryError& error) {
  try {
    const nb::object errors = nb::module_::import_("tensorpool.errors");
    raise(errors.attr("_out_of_memory")(error.what(), report_fields(error.report())));
  } catch (const nb::python_error&) {
    PyErr_SetString(PyExc_MemoryError, error.what());
  }
}

void translate(const std::exception_ptr& pending, void*) {
  try {
    std::rethrow_exception(pending);
  } catch (const OutOfMemoryError& error) {
    raise_out_of_memory(error);
  } catch (const InvalidArgument& error) {
    raise_class("InvalidArgumentError", PyExc_ValueError, error.what());
  } catch (const Error& error) {
    raise_class("InternalError", PyExc_RuntimeError, error.what());
  }
  // Anything else propagates to nanobind's own translators (std::bad_alloc -> MemoryError, ...).
}

// The advice in the package's terms: fit's argument, the estimate's function, the environment variables the
// process reads when it first uses its devices, the strategy's keyword.
const report::AdviceWords& python_words() {
  static const report::AdviceWords words{
      .batch_size = "batch_size={}",
      .check_estimate = "tensorpool.memory.estimate(model, {}).fits",
      .expandable = "TP_ALLOCATOR=expandable",
      .allow_growth = "TP_ALLOW_GROWTH={}",
      .bfc_allow_growth = "TP_ALLOCATOR=bfc TP_ALLOW_GROWTH={}",
      .more_sim_memory = "a larger TP_SIM_MEMORY",
      .smaller_layers = "use smaller Dense layers",
      .shard_optimizer = "MirroredStrategy(shard='optimizer')",
      .mirrored_shard_optimizer = "tf.distribute.MirroredStrategy(shard='optimizer')"};
  return words;
}

}  // namespace

void add_oom_advice(OutOfMemoryError& error, train::Sequential& model, std::int64_t batch_size,
                    std::string_view batches_on) noexcept {
  try {
    device::DeviceManager* given = model.session().options().devices;
    device::DeviceManager& manager = given != nullptr ? *given : device::DeviceManager::instance();
    std::vector<device::Device*> devices;
    for (const std::string& name : model.devices()) devices.push_back(&manager.device(name));
    report::add_oom_advice(error, model, devices, batch_size, batches_on, python_words());
  } catch (const std::exception& advising) {
    try {
      error.amend([&advising](OutOfMemoryReport& report) {
        report.suggestion = std::string("(no advice: ") + advising.what() + ")";
      });
    } catch (...) {  // out of host memory as well: the error keeps its report without a suggestion
    }
  }
}

void bind_errors(nb::module_& module) {
  static_cast<void>(module);
  nb::register_exception_translator(translate);
}

}  // namespace tp::python
