#pragma once
// The concrete fix for an out-of-memory error during training, from what the CLI knows about the workload:
// the largest batch size whose static plan fits every device (searched by planning only, nothing allocated),
// the expandable allocator when fragmentation caused it, trim when reserved memory sits free, and the share
// of the optimizer state. Written into the error's report (OutOfMemoryReport::suggestion), so what() says it.
#include <cstdint>
#include <vector>

#include "tensorpool/device/device.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::cli {

// Plans leave this share of each device's limit for the allocator's rounding and region growth.
inline constexpr double kPlanHeadroom = 0.9;

// The largest global batch below `batch_size` whose planned peak (after rounding) stays within kPlanHeadroom
// of every device's limit; 0 when not even 1 fits.
std::int64_t largest_fitting_batch(train::Sequential& model, const std::vector<device::Device*>& devices,
                                   std::int64_t batch_size);

void add_oom_advice(OutOfMemoryError& error, train::Sequential& model, const std::vector<device::Device*>& devices,
                    std::int64_t batch_size);

}  // namespace tp::cli
