// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a Session is allowed to use and how it runs.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensorpool/memory/memory_config.hpp"

namespace tp::device {
class DeviceManager;
}

namespace tp::arbiter {
class MemoryArbiter;
}

namespace tp::runtime {

struct SessionOptions {                        // {} initialisers: designated initialisers may name any subset
  std::string name = "session";                // names the session in reports and quota errors
  std::vector<std::string> visible_devices{};  // device names the session may use; empty: all
  std::string default_device{};                // empty: the first visible accelerator, else cpu:0
  bool soft_placement = true;                  // nodes without a kernel on their device go to cpu:0
  bool planner = true;                         // off: every tensor from the online allocator, every step
  // The session's share of each device it uses: allocations beyond it raise OutOfMemoryError naming the
  // session and the quota while other sessions run on. Unset: the device's whole budget.
  std::optional<std::size_t> memory_quota_bytes{};
  // The arbiter that holds the quotas (several processes can share one over shared memory); null: the
  // process's in-process arbiter of each device.
  tp::arbiter::MemoryArbiter* arbiter = nullptr;
  // Per-device memory configuration (allow growth, fraction, limit, allocator), applied to the device manager
  // before the devices exist. A device that already exists with another configuration is an error (as
  // TensorFlow fixes GPU options at the first session).
  std::map<std::string, memory::MemoryConfig> device_memory{};
  // The CPU kernel settings the session applies to each of its devices (and cpu:0) when it is made, through
  // Device::configure_kernels (device::KernelOptions says what each means):
  // > 0: threads of one CPU kernel, the GEMM blocks and the element-wise loops alike (one pool per process,
  // so the latest setting holds); 0: left as it is (one thread unless set before)
  int intra_op_threads = 0;
  // The float32 GEMM library of the CPU kernels on the session's devices: "auto" (per shape class, the faster
  // of the two on this machine, timed at its first product), "openblas" or "onednn" (results differ between
  // the two in the last bits). Empty: left as it is ("auto" unless set before).
  std::string gemm_library{};
  // How many independent ops of a step may run at once (TensorFlow's inter_op_parallelism_threads). 0 or 1:
  // ops run one after another in schedule order, launched by the calling thread. N > 1: N host threads
  // launch ops as soon as their inputs are ready, and a device runs up to min(N, its streams) kernels at
  // once, one per stream (DeviceOptions::num_streams). Results are the same either way; the static plan's
  // peak too (reused arena memory orders the ops that share it).
  int inter_op_threads = 0;
  // When a device refuses one of the session's variables or its step arena, at a step boundary, while as much
  // memory as the request is free there (in pieces): whether the session then waits for its work, moves its
  // own variables and arena on that device down over the holes between blocks (Device::compact: the
  // expandable allocator only; the others cannot move blocks) and retries once. The memory the holes pinned
  // then serves the request instead of an OutOfMemoryError; one refused again says what the compaction moved
  // and gave back. A real shortage, or the session's quota, is refused at once.
  bool compact_on_oom = true;
  device::DeviceManager* devices = nullptr;  // null: DeviceManager::instance()
};

struct RunOptions {
  std::int64_t step = 1;  // the training step kernels see (Adam's bias correction counts from 1)
};

}  // namespace tp::runtime
