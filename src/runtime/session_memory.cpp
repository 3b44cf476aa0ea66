// SPDX-License-Identifier: Apache-2.0
#include "runtime/session_memory.hpp"

#include "tensorpool/arbiter/in_process_arbiter.hpp"
#include "tensorpool/arbiter/quota_adaptor.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::runtime {

using arbiter::InProcessArbiter;
using arbiter::MemoryArbiter;
using arbiter::QuotaAdaptor;

namespace {

// The process's arbiter of a device: its budget is the device's memory limit; it lives as long as the device.
MemoryArbiter& device_arbiter(device::Device& device) {
  const std::shared_ptr<void> arbiter = device.extension("runtime/arbiter", [&device] {
    return std::static_pointer_cast<void>(
        std::make_shared<InProcessArbiter>(device.memory().limit_bytes(), device.name() + "/arbiter"));
  });
  return *static_cast<MemoryArbiter*>(arbiter.get());
}

}  // namespace

std::shared_ptr<memory::MemoryResource> make_session_memory(device::Device& device, const SessionOptions& options) {
  MemoryArbiter& arbiter = options.arbiter != nullptr ? *options.arbiter : device_arbiter(device);
  const std::size_t quota = options.memory_quota_bytes.value_or(arbiter.budget_bytes());
  if (quota == 0 || quota > arbiter.budget_bytes()) {
    TP_THROW(InvalidArgument, "session", "session '", options.name, "': memory quota of ", quota, " bytes on ",
             device.name(), " must be in 1..", arbiter.budget_bytes(), " (the budget of ", arbiter.name(), ")");
  }
  return std::make_shared<QuotaAdaptor>(device.memory(), arbiter, options.name + "@" + device.name(), quota);
}

}  // namespace tp::runtime
