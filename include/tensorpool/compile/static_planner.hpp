// SPDX-License-Identifier: Apache-2.0
#pragma once
// Static memory planner: before a step runs, give every intermediate tensor of one device an offset in one
// arena so that tensors live at the same time never overlap, as XLA's heap simulator does. Liveness comes from
// the schedule: a tensor is live from the step that produces it to the last step that reads it (a fetched
// tensor to the end). Offsets come from memory::plan_offsets (decreasing size and decreasing lifetime, best
// and first fit; the smallest heap is kept).
//
// In-place reuse: a request may name an earlier request it may share memory with (an elementwise op whose
// input dies at this op: relu, the arithmetic ops). The two become one buffer with the union of their
// lifetimes, when their rounded sizes match and the earlier one's last reader is the producer of the later.
//
// Invariants of a plan: arena_bytes >= lower_bound_bytes; every request has an offset with
// offset + rounded bytes <= arena_bytes, a multiple of kPlanAlignment; two requests whose lifetimes overlap
// and that are not shared occupy disjoint ranges.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tp::compile {

inline constexpr std::size_t kPlanAlignment = 256;

struct BufferRequest {
  std::string name;              // the tensor ("dense/MatMul:0"), for reports
  std::size_t bytes = 0;         // as the tensor needs them (may be 0)
  std::size_t first_step = 0;    // producing step
  std::size_t last_step = 0;     // last reading step (>= first_step)
  std::int64_t share_with = -1;  // index of an earlier request this one may reuse in place, or -1
};

struct PlannedBuffer {
  std::size_t offset = 0;
  std::size_t bytes = 0;  // rounded to kPlanAlignment
  bool shared = false;    // reuses the memory of its share_with request
};

struct StaticPlan {
  std::size_t arena_bytes = 0;
  std::size_t lower_bound_bytes = 0;   // max over steps of the sum of rounded live bytes (after sharing)
  std::vector<PlannedBuffer> buffers;  // one per request, in input order
  std::string strategy;                // which placement order won, e.g. "size/best-fit"
  std::size_t shared_buffers = 0;      // requests served in place
};

// Throws tp::InvalidArgument naming the request when last_step < first_step or share_with does not name an
// earlier request.
[[nodiscard]] StaticPlan plan_static(std::span<const BufferRequest> requests);

}  // namespace tp::compile
