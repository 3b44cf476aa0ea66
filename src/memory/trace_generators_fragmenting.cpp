// SPDX-License-Identifier: Apache-2.0
// The fragmenting generator: a trace made for one replay capacity on which best fit and granule-backed
// allocators run out of memory with enough free in total (trace_generators.hpp).
#include <algorithm>
#include <string>
#include <vector>

#include "memory/trace_synthesis.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/trace_generators.hpp"

namespace tp::memory {

using trace_synthesis::Rng;
using trace_synthesis::TraceBuilder;

namespace {

constexpr std::size_t kGranule = 2 * kMiB;   // the expandable arena's granule on a simulated device
constexpr std::size_t kSizeStep = 4 * kKiB;  // sizes are multiples of it: no allocator rounds them

struct Item {
  std::size_t handle = 0;
  std::size_t offset = 0;  // where an allocator that lays blocks end to end from 0 puts it
  std::size_t bytes = 0;
  bool kept = false;
};

std::size_t draw(Rng& rng, std::size_t low, std::size_t high) {
  return rng.between(low / kSizeStep, high / kSizeStep) * kSizeStep;
}

}  // namespace

Trace generate_fragmenting_trace(const FragmentingTraceOptions& options, std::vector<FragmentingStep>* steps_out) {
  if (options.capacity_bytes < 32 * kMiB || options.steps == 0 || options.pairs_per_group == 0) {
    TP_THROW(InvalidArgument, "trace", "fragmenting trace options need capacity_bytes >= 32 MiB, steps > 0 and ",
             "pairs_per_group > 0 (got ", options.capacity_bytes, ", ", options.steps, ", ", options.pairs_per_group,
             ")");
  }
  const std::size_t capacity = options.capacity_bytes / kGranule * kGranule;
  const std::size_t fill_target = capacity / 8 * 7;
  Rng rng(options.seed);
  TraceBuilder builder(rng);
  if (steps_out != nullptr) steps_out->clear();
  for (std::size_t step = 0; step < options.steps; ++step) {
    std::vector<Item> items;
    std::size_t end = 0;
    // Appends one block if it fits under the fill target; false (nothing added) once it does not.
    auto add = [&](std::size_t bytes, bool kept) {
      if (end + bytes > fill_target) return false;
      items.push_back(Item{builder.allocate(bytes), end, bytes, kept});
      end += bytes;
      return true;
    };
    bool full = false;
    for (std::size_t group = 0; !full; ++group) {
      // Large blocks start on a granule boundary and are whole granules: every other one stays live.
      full = !add(kGranule * rng.between(2, 3), group % 2 == 0);
      for (std::size_t pair = 0; pair < options.pairs_per_group && !full; ++pair) {
        full = !add(draw(rng, 256 * kKiB, kMiB), true);
        std::size_t temporary = draw(rng, kMiB, 3 * kMiB / 2);
        if (pair + 1 == options.pairs_per_group) {  // pad the group to a whole granule
          temporary += (kGranule - (end + temporary) % kGranule) % kGranule;
        }
        full = full || !add(temporary, false);
      }
    }
    // Free the temporaries and every other large block; measure the holes an end-to-end layout leaves.
    FragmentingStep layout;
    std::vector<bool> pinned(capacity / kGranule, false);  // granules a live block touches
    std::size_t hole = 0;
    std::size_t last_live = 0;  // where the highest live block ends
    for (const Item& item : items) {
      if (item.kept) {
        layout.live_bytes += item.bytes;
        last_live = item.offset + item.bytes;
        for (std::size_t granule = item.offset / kGranule; granule * kGranule < item.offset + item.bytes; ++granule) {
          pinned[granule] = true;
        }
        hole = 0;
      } else {
        builder.free(item.handle);
        hole += item.bytes;
        layout.largest_hole_bytes = std::max(layout.largest_hole_bytes, hole);
      }
    }
    layout.tail_bytes = capacity - last_live;
    const auto unpinned = static_cast<std::size_t>(std::count(pinned.begin(), pinned.end(), false));
    // Larger than every hole and the tail (best fit has no block for it) and than every granule no live
    // block touches (a granule-backed allocator cannot commit enough), yet within what the limit leaves.
    layout.request_bytes =
        std::max({layout.largest_hole_bytes + kGranule, layout.tail_bytes + kGranule, (unpinned + 1) * kGranule});
    layout.request_bytes = (layout.request_bytes + kGranule - 1) / kGranule * kGranule;
    if (layout.request_bytes + layout.live_bytes > capacity) {
      TP_THROW(InvalidArgument, "trace", "fragmenting trace: step ", step, " needs ",
               layout.request_bytes + layout.live_bytes, " bytes, more than capacity_bytes ", capacity,
               "; raise capacity_bytes or lower pairs_per_group");
    }
    const std::size_t request = builder.allocate(layout.request_bytes);
    builder.free(request);
    for (const Item& item : items) {
      if (item.kept) builder.free(item.handle);
    }
    builder.pause(50'000);
    if (steps_out != nullptr) steps_out->push_back(layout);
  }
  return builder.finish("fragmenting(seed=" + std::to_string(options.seed) + ", capacity=" + std::to_string(capacity) +
                        ")");
}

}  // namespace tp::memory
