// SPDX-License-Identifier: Apache-2.0
#pragma once
// rekey: an entry of a node-based map (std::unordered_map, std::map) moves to another key, keeping its value,
// as records keyed by address follow a block that compaction moved (memory/compaction.hpp).

#include <utility>

namespace tp {

// Moves the entry at `from` to `to` through its node: no copy of the value and no allocation, so it may run
// where nothing may throw (under an allocator's lock). Returns the moved value, or null when there is no entry
// at `from`, or when an entry is already at `to`: that one stays (the moved node is dropped), as a map insert
// never overwrites.
template <typename Map>
typename Map::mapped_type* rekey(Map& map, const typename Map::key_type& from,
                                 const typename Map::key_type& to) noexcept {
  auto node = map.extract(from);
  if (node.empty()) return nullptr;
  node.key() = to;
  auto inserted = map.insert(std::move(node));
  return inserted.inserted ? &inserted.position->second : nullptr;
}

}  // namespace tp
