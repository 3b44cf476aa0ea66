// SPDX-License-Identifier: Apache-2.0
#pragma once
// What an allocation is for. Callers (tensors, the executor, the replay tool) attach a tag to each
// allocation; adaptors pass it up the stack unchanged and the TrackingAdaptor stores it, so profiles and
// out-of-memory reports can name the tensor that holds each byte.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tp::memory {

// One vocabulary for what memory holds, shared by OOM reports, the profiler, `tensorpool estimate` and train's
// memory summary (the step's tensors inside the arena are told apart by train::StepTensorKind, plan_bytes.hpp).
enum class AllocationKind : std::uint8_t {
  unknown,
  parameter,
  gradient,  // a persistent gradient buffer, of its variable's shape: "weight_gradient"
  optimizer_state,
  activation,
  temporary,
  staging,
  step_arena,  // a session's planned arena: one allocation holding a step's activations and gradients
  fetched,     // a step's fetched result (the loss, a metric) allocated outside the arena, for the host to read
};

std::string_view to_string(AllocationKind kind) noexcept;

struct AllocationTag {
  std::string name{};                 // tensor name, e.g. "dense/kernel"
  std::string op{};                   // op that produced it, e.g. "MatMul"
  std::vector<std::int64_t> shape{};  // logical shape; empty for untyped buffers
  std::string dtype{};                // "float32", ...; empty for untyped buffers
  AllocationKind kind = AllocationKind::unknown;
  std::int64_t step = -1;  // training step, -1 outside a step

  bool empty() const noexcept { return name.empty() && op.empty() && kind == AllocationKind::unknown; }
  // "dense/kernel (MatMul, float32[784,512], parameter, step 3)"; "<untagged>" when empty.
  [[nodiscard]] std::string describe() const;
};

}  // namespace tp::memory
