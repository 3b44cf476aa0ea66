// SPDX-License-Identifier: Apache-2.0
// ExpandableArena: the free index. Free blocks are binned by size (bin_of: fine bins, so a bin's tree holds
// few blocks unless many free blocks have nearly one size); each bin is an intrusive treap ordered by (size, offset),
// so the bins in turn give the global order. The links live in the nodes (no allocation per operation); heap
// priorities are a hash of the node index, so each tree is shaped like a random binary search tree (expected
// depth O(log n)). Erasing needs no key comparison, so a block's key may change once it is out of the index.
// The caller holds mutex_.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "tensorpool/memory/expandable_arena.hpp"

namespace tp::memory {

// Murmur3's finalizer: sequential node indices get unrelated priorities.
std::uint32_t ExpandableArena::treap_priority(std::uint32_t index) noexcept {
  index ^= index >> 16;
  index *= 0x85ebca6bu;
  index ^= index >> 13;
  index *= 0xc2b2ae35u;
  index ^= index >> 16;
  return index;
}

bool ExpandableArena::free_less(std::uint32_t a, std::uint32_t b) const noexcept {
  const Block& x = nodes_[a];
  const Block& y = nodes_[b];
  return x.size != y.size ? x.size < y.size : x.offset < y.offset;
}

// Without a branch on where the next bin lies, in the bin's own word or a later one: the word summary names the
// bin's own word only when later bins there hold blocks, and the word past the last (always empty), so the
// lowest word it names is the answer's or that empty one. Selections are arithmetic (the compiler branches on
// a conditional here, which mispredicts as often as the blocks' sizes vary).
std::uint32_t ExpandableArena::first_in_bin_after(std::size_t bin) const noexcept {
  const std::size_t from = bin + 1;  // <= kBins
  const std::size_t word = from / 64;
  const std::size_t in_word = from % 64;
  const std::uint64_t here = nonempty_bins_[word] & (~std::uint64_t{0} << in_word);
  const std::uint64_t words = (nonempty_words_ & (~std::uint64_t{1} << word)) |
                              (static_cast<std::uint64_t>(here != 0) << word) | (std::uint64_t{1} << kBinWords);
  const auto found = static_cast<std::size_t>(std::countr_zero(words));
  const std::uint64_t bits =
      nonempty_bins_[found] & (~std::uint64_t{0} << (in_word * static_cast<std::size_t>(found == word)));
  if (bits == 0) return kNone;
  std::uint32_t index = bin_roots_[64 * found + static_cast<std::size_t>(std::countr_zero(bits))];
  while (nodes_[index].left != kNone) index = nodes_[index].left;
  return index;
}

std::uint32_t ExpandableArena::last_in_bin_before(std::size_t bin) const noexcept {
  if (bin == 0) return kNone;
  const std::size_t to = std::min(bin, kBins) - 1;  // the highest bin that may answer
  std::size_t word = to / 64;
  std::uint64_t bits = nonempty_bins_[word] & (~std::uint64_t{0} >> (63 - to % 64));
  if (bits == 0) {
    const std::uint64_t earlier = nonempty_words_ & ((std::uint64_t{1} << word) - 1);
    if (earlier == 0) return kNone;
    word = static_cast<std::size_t>(63 - std::countl_zero(earlier));
    bits = nonempty_bins_[word];
  }
  std::uint32_t index = bin_roots_[64 * word + static_cast<std::size_t>(63 - std::countl_zero(bits))];
  while (nodes_[index].right != kNone) index = nodes_[index].right;
  return index;
}

// Priorities are distinct (treap_priority is a bijection of the index), so a bin's tree is the one treap of
// its keys and priorities: inserting and erasing top-down, by splitting and merging, leaves the same tree as
// rotations would, with fewer writes.

void ExpandableArena::insert_free(std::uint32_t index, std::size_t bin) noexcept {
  Block& block = nodes_[index];
  block.bin = static_cast<std::uint16_t>(bin);
  ++free_count_;
  if (bin_roots_[bin] == kNone) {  // most bins hold no block, so a block mostly lands alone
    bin_roots_[bin] = index;
    block.parent = kNone;
    block.left = kNone;
    block.right = kNone;
    mark_bin(bin);
    return;
  }
  const std::size_t size = block.size;
  const std::size_t offset = block.offset;
  const std::uint32_t priority = block.priority;
  const auto less_than_block = [&](const Block& other) noexcept {
    return other.size != size ? other.size < size : other.offset < offset;
  };
  // Down by key to where the block's priority puts it: above every node of lower priority on its path.
  std::uint32_t parent = kNone;
  std::uint32_t* link = &bin_roots_[bin];
  std::uint32_t cursor = *link;
  while (cursor != kNone && nodes_[cursor].priority > priority) {
    Block& other = nodes_[cursor];
    parent = cursor;
    link = less_than_block(other) ? &other.right : &other.left;
    cursor = *link;
  }
  *link = index;
  block.parent = parent;
  // Split the subtree that was there by the block's key: smaller keys go left, larger right.
  std::uint32_t* left_link = &block.left;
  std::uint32_t* right_link = &block.right;
  std::uint32_t left_parent = index;
  std::uint32_t right_parent = index;
  while (cursor != kNone) {
    Block& other = nodes_[cursor];
    if (less_than_block(other)) {
      *left_link = cursor;
      other.parent = left_parent;
      left_parent = cursor;
      left_link = &other.right;
      cursor = other.right;
    } else {
      *right_link = cursor;
      other.parent = right_parent;
      right_parent = cursor;
      right_link = &other.left;
      cursor = other.left;
    }
  }
  *left_link = kNone;
  *right_link = kNone;
}

void ExpandableArena::erase_free(std::uint32_t index) noexcept {
  Block& block = nodes_[index];
  --free_count_;
  if ((block.parent & block.left & block.right) == kNone) {  // alone in its bin, as most blocks are
    bin_roots_[block.bin] = kNone;
    unmark_bin(block.bin);
    return;
  }
  // Merge the two subtrees in its place: the higher priority of the two heads comes first.
  std::uint32_t parent = block.parent;
  std::uint32_t* link = parent == kNone                ? &bin_roots_[block.bin]
                        : nodes_[parent].left == index ? &nodes_[parent].left
                                                       : &nodes_[parent].right;
  std::uint32_t left = block.left;
  std::uint32_t right = block.right;
  while (left != kNone && right != kNone) {
    if (nodes_[left].priority > nodes_[right].priority) {
      *link = left;
      nodes_[left].parent = parent;
      parent = left;
      link = &nodes_[left].right;
      left = *link;
    } else {
      *link = right;
      nodes_[right].parent = parent;
      parent = right;
      link = &nodes_[right].left;
      right = *link;
    }
  }
  const std::uint32_t rest = left != kNone ? left : right;
  *link = rest;
  if (rest != kNone) nodes_[rest].parent = parent;
  block.left = kNone;
  block.right = kNone;
  block.parent = kNone;
  const std::size_t bin = block.bin;
  if (bin_roots_[bin] == kNone) unmark_bin(bin);
}

void ExpandableArena::rekey_free(std::uint32_t index, std::size_t offset, std::size_t size) noexcept {
  Block& block = nodes_[index];
  const bool grows = size != block.size ? size > block.size : offset > block.offset;
  block.offset = offset;
  block.size = size;
  // In its bin, only the neighbour on the side the key moved to can be passed; the priority is unchanged.
  const std::size_t bin = bin_of(size);
  if (bin == block.bin) {
    const std::uint32_t neighbour = grows ? tree_next(index) : tree_prev(index);
    if (neighbour == kNone || (grows ? free_less(index, neighbour) : free_less(neighbour, index))) return;
  }
  erase_free(index);
  insert_free(index, bin);
}

std::uint32_t ExpandableArena::free_lower_bound(std::size_t size) const noexcept {
  const std::size_t bin = bin_of(size);
  std::uint32_t found = kNone;
  for (std::uint32_t cursor = bin_roots_[bin]; cursor != kNone;) {  // a step selects, without a branch
    const Block& node = nodes_[cursor];
    const bool at_least = node.size >= size;
    found = at_least ? cursor : found;
    cursor = at_least ? node.left : node.right;
  }
  return found != kNone ? found : first_in_bin_after(bin);
}

bool ExpandableArena::free_contains(std::uint32_t index) const noexcept {
  if (nodes_[index].bin != bin_of(nodes_[index].size)) return false;
  for (std::uint32_t cursor = bin_roots_[nodes_[index].bin]; cursor != kNone;) {
    if (cursor == index) return true;
    cursor = free_less(index, cursor) ? nodes_[cursor].left : nodes_[cursor].right;
  }
  return false;
}

std::uint32_t ExpandableArena::free_next(std::uint32_t index) const noexcept {
  const std::uint32_t next = tree_next(index);
  return next != kNone ? next : first_in_bin_after(nodes_[index].bin);
}

std::uint32_t ExpandableArena::free_prev(std::uint32_t index) const noexcept {
  const std::uint32_t prev = tree_prev(index);
  return prev != kNone ? prev : last_in_bin_before(nodes_[index].bin);
}

std::uint32_t ExpandableArena::tree_next(std::uint32_t index) const noexcept {
  if (nodes_[index].right != kNone) {
    index = nodes_[index].right;
    while (nodes_[index].left != kNone) index = nodes_[index].left;
    return index;
  }
  std::uint32_t parent = nodes_[index].parent;
  while (parent != kNone && nodes_[parent].right == index) {
    index = parent;
    parent = nodes_[parent].parent;
  }
  return parent;
}

std::uint32_t ExpandableArena::tree_prev(std::uint32_t index) const noexcept {
  if (nodes_[index].left != kNone) {
    index = nodes_[index].left;
    while (nodes_[index].right != kNone) index = nodes_[index].right;
    return index;
  }
  std::uint32_t parent = nodes_[index].parent;
  while (parent != kNone && nodes_[parent].left == index) {
    index = parent;
    parent = nodes_[parent].parent;
  }
  return parent;
}

std::uint32_t ExpandableArena::free_last() const noexcept { return last_in_bin_before(kBins); }

// Walks each bin's tree from its root: links agree both ways, priorities form a heap, every node is a free
// block of the bin's sizes, the bin mask names the non-empty bins, the in-order walk over all bins is strictly
// increasing, and the index holds `free_blocks` nodes.
std::string ExpandableArena::check_free_index(std::size_t free_blocks) const {
  for (std::size_t word = 0; word < kBinWords; ++word) {
    if (((nonempty_words_ >> word) & 1) != (nonempty_bins_[word] != 0 ? 1u : 0u)) {
      return "the non-empty word mask of the bins is stale";
    }
  }
  if ((nonempty_words_ >> kBinWords) != 0 || nonempty_bins_[kBinWords] != 0) {
    return "the non-empty masks of the bins name a bin past the last";
  }
  std::size_t seen = 0;
  std::vector<std::uint32_t> pending;
  for (std::size_t bin = 0; bin < kBins; ++bin) {
    const std::uint32_t root = bin_roots_[bin];
    if (((nonempty_bins_[bin / 64] >> (bin % 64)) & 1) != (root != kNone ? 1u : 0u)) {
      return "the non-empty bin mask is stale";
    }
    if (root == kNone) continue;
    if (root >= nodes_.size() || nodes_[root].parent != kNone) return "a free index root is stale";
    pending.push_back(root);
    while (!pending.empty()) {
      const std::uint32_t index = pending.back();
      pending.pop_back();
      const Block& block = nodes_[index];
      const std::string where = "free index node " + std::to_string(index);
      if (++seen > free_blocks) return "the free index holds more nodes than there are free blocks";
      if (block.in_use) return where + " is an in-use block";
      if (block.bin != bin || bin_of(block.size) != bin) return where + " is in the wrong bin";
      if (block.priority != treap_priority(index)) return where + " has a stale priority";
      for (const std::uint32_t child : {block.left, block.right}) {
        if (child == kNone) continue;
        if (child >= nodes_.size() || nodes_[child].parent != index) return where + " has a child with a stale parent";
        if (nodes_[child].priority > block.priority) return where + " has a child of higher priority";
        pending.push_back(child);
      }
    }
  }
  if (seen != free_blocks || free_count_ != free_blocks) {
    return "the free index holds " + std::to_string(seen) + " blocks (counted " + std::to_string(free_count_) + "), " +
           std::to_string(free_blocks) + " are free";
  }
  std::uint32_t previous = kNone;
  for (std::uint32_t index = free_lower_bound(0); index != kNone; index = free_next(index)) {
    if (previous != kNone && !free_less(previous, index)) return "the free index walk is out of order";
    previous = index;
  }
  return "";
}

}  // namespace tp::memory
