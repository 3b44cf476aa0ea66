// SPDX-License-Identifier: Apache-2.0
#pragma once
// A session's memory on one device: the resource every byte it holds there is allocated through, charging
// its client of the device's arbiter (its quota) and keeping its own statistics.

#include <memory>

#include "tensorpool/device/device.hpp"
#include "tensorpool/runtime/session_options.hpp"

namespace tp::runtime {

std::shared_ptr<memory::MemoryResource> make_session_memory(device::Device& device, const SessionOptions& options);

}  // namespace tp::runtime
