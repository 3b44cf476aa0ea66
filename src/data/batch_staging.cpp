// SPDX-License-Identifier: Apache-2.0
#include "data/batch_staging.hpp"

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/memory/host_resource.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/pinned_host_resource.hpp"

namespace tp::data::detail {

namespace {

// Grows on demand, bounded only by the host: prefetching n batches needs n batches of memory.
memory::MemoryConfig staging_config(const std::string& name) {
  memory::MemoryConfig config;
  config.device = name;
  config.policy = memory::GrowthPolicy::grow;
  const std::size_t physical = memory::host_physical_memory_bytes();
  config.limit_bytes = physical != 0 ? physical : 64 * kGiB;
  config.tracking = true;  // per-batch records ("batch/x", staging) for inspection
  return config;
}

// The first line of an error message (an OOM report spans several).
std::string first_line(const char* text) {
  std::string line(text);
  const std::size_t end = line.find('\n');
  return end == std::string::npos ? line : line.substr(0, end);
}

}  // namespace

BatchStaging::BatchStaging(std::string name, const SourceFactory& pinned_source) : name_(std::move(name)) {
  std::unique_ptr<memory::MemoryResource> source =
      pinned_source ? pinned_source() : std::make_unique<memory::PinnedHostResource>(name_ + "/pinned");
  stack_ = memory::make_memory_stack(staging_config(name_), std::move(source));
}

std::shared_ptr<memory::MemoryStack> BatchStaging::stack() const {
  std::lock_guard lock(mutex_);
  return stack_;
}

void BatchStaging::fall_back_to_pageable(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (!pinned_.load(std::memory_order_relaxed)) return;
  TP_LOG(warning, "data", name_, ": pinned staging memory refused (", why, "); staging batches in pageable memory");
  stack_ =
      memory::make_memory_stack(staging_config(name_), std::make_unique<memory::HostResource>(name_ + "/pageable"));
  pinned_.store(false, std::memory_order_relaxed);
}

std::shared_ptr<Buffer> BatchStaging::allocate(device::Device& device, std::size_t bytes,
                                               const memory::AllocationTag& tag) {
  if (!device.host_accessible()) {
    std::shared_ptr<Buffer> buffer = device.allocate_shared(bytes, tag);
    if (!buffer->host_visible()) {
      TP_THROW(InvalidArgument, "data", name_, ": batches are assembled by host code, and ",
               device.shared_memory_note(), "; stage them on cpu:0");
    }
    return buffer;
  }
  std::shared_ptr<memory::MemoryStack> current = stack();
  if (!pinned()) return device.allocate(bytes, tag, std::move(current));
  try {
    return device.allocate(bytes, tag, current);
  } catch (const DeviceError& error) {  // a pinned source that reports the refusal itself
    fall_back_to_pageable(first_line(error.what()));
  } catch (const OutOfMemoryError& error) {  // BFC's report of a refused region (the budget is the host's RAM)
    fall_back_to_pageable(first_line(error.what()));
  }
  return device.allocate(bytes, tag, stack());
}

memory::MemoryStats BatchStaging::stats() const { return stack()->stats(); }

}  // namespace tp::data::detail
