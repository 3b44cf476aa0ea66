// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/compile/static_planner.hpp"

#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/offline_planner.hpp"

namespace tp::compile {

namespace {

void check_requests(std::span<const BufferRequest> requests) {
  for (std::size_t index = 0; index < requests.size(); ++index) {
    const BufferRequest& request = requests[index];
    if (request.last_step < request.first_step) {
      TP_THROW(InvalidArgument, "planner", "buffer '", request.name, "' is last read at step ", request.last_step,
               " before it is produced at step ", request.first_step);
    }
    if (request.share_with >= static_cast<std::int64_t>(index)) {
      TP_THROW(InvalidArgument, "planner", "buffer '", request.name, "' may share with request ", request.share_with,
               ", which is not an earlier request (it is #", index, ")");
    }
  }
}

}  // namespace

StaticPlan plan_static(std::span<const BufferRequest> requests) {
  check_requests(requests);
  // Each request joins a group (one physical buffer): its own, or that of the request it reuses in place.
  std::vector<std::size_t> group_of(requests.size());
  std::vector<memory::LiveInterval> groups;
  std::vector<bool> shared(requests.size(), false);
  std::vector<std::size_t> group_last_reader(requests.size(), 0);
  for (std::size_t index = 0; index < requests.size(); ++index) {
    const BufferRequest& request = requests[index];
    const std::size_t rounded = memory::round_up(request.bytes, kPlanAlignment);
    if (request.share_with >= 0) {
      const auto other = static_cast<std::size_t>(request.share_with);
      const std::size_t group = group_of[other];
      // The earlier tensor's memory is free for reuse only if its last reader is this tensor's producer (it
      // reads its input and writes its output in one elementwise pass) and the sizes agree.
      if (groups[group].bytes == rounded && rounded != 0 && requests[other].last_step == request.first_step &&
          group_last_reader[group] == request.first_step) {
        group_of[index] = group;
        groups[group].end = std::max(groups[group].end, request.last_step + 1);
        group_last_reader[group] = request.last_step;
        shared[index] = true;
        continue;
      }
    }
    group_of[index] = groups.size();
    group_last_reader[groups.size()] = request.last_step;
    groups.push_back({request.first_step, request.last_step + 1, rounded});
  }
  // plan_offsets wants positive sizes; empty buffers take no room and sit at offset 0.
  std::vector<memory::LiveInterval> sized;
  std::vector<std::size_t> sized_index(groups.size(), 0);
  for (std::size_t group = 0; group < groups.size(); ++group) {
    if (groups[group].bytes == 0) continue;
    sized_index[group] = sized.size();
    sized.push_back(groups[group]);
  }
  StaticPlan plan;
  if (!sized.empty()) {
    const memory::OfflinePlan offline = memory::plan_offsets(sized);
    plan.arena_bytes = offline.heap_bytes;
    plan.lower_bound_bytes = offline.lower_bound_bytes;
    plan.strategy = offline.strategy;
    for (std::size_t index = 0; index < requests.size(); ++index) {
      const std::size_t group = group_of[index];
      const std::size_t offset = groups[group].bytes == 0 ? 0 : offline.offsets[sized_index[group]];
      plan.buffers.push_back({offset, groups[group].bytes, shared[index]});
    }
  } else {
    plan.strategy = "empty";
    for (std::size_t index = 0; index < requests.size(); ++index) plan.buffers.push_back({0, 0, shared[index]});
  }
  for (bool is_shared : shared) plan.shared_buffers += is_shared ? 1 : 0;
  return plan;
}

}  // namespace tp::compile
