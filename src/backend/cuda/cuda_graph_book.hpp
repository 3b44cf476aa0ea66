// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host-side bookkeeping of a CUDA stream's graph capture (cuda_stream_graphs.cpp; docs/cuda.md, "CUDA
// graphs"), kept free of CUDA so that it is tested without a GPU.
//
// - SegmentShape: what identifies a captured segment for reuse of its executable graph: the command tasks it
//   ran and the nodes its graph has. Reuse is only an attempt: the executable is brought up to date with the
//   newly captured graph (cudaGraphExecUpdate), and a refused update instantiates afresh, so a shape that
//   matches a different launch sequence costs time, never correctness.
// - ExecCache: at most kMaxExecs executables per stream, by shape; inserting into a full cache destroys every
//   one it holds first (a stream whose segments never repeat does not keep executables without bound).
// - CaptureFailures: capture failures of one stream; after kLimit of them (a command that cannot be captured,
//   CUDA refusing capture) the stream stops capturing and runs its commands eagerly for the rest of its life.

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <utility>

namespace tp::backend::cuda {

struct SegmentShape {
  std::size_t tasks = 0;
  std::size_t nodes = 0;
  auto operator<=>(const SegmentShape&) const = default;
};

// Owns handles of type Exec (a cudaGraphExec_t, or a plain value in tests); `destroy` releases one.
template <typename Exec>
class ExecCache {
 public:
  static constexpr std::size_t kMaxExecs = 16;

  explicit ExecCache(std::function<void(Exec)> destroy) : destroy_(std::move(destroy)) {}
  ~ExecCache() { clear(); }
  ExecCache(const ExecCache&) = delete;
  ExecCache& operator=(const ExecCache&) = delete;

  [[nodiscard]] std::optional<Exec> find(const SegmentShape& shape) const {
    const auto found = execs_.find(shape);
    if (found == execs_.end()) return std::nullopt;
    return found->second;
  }
  // Takes `exec` for `shape`, destroying the one held for it (or, when full, every one held).
  void insert(const SegmentShape& shape, Exec exec) {
    erase(shape);
    if (execs_.size() >= kMaxExecs) clear();
    execs_.emplace(shape, exec);
  }
  // Destroys the executable held for `shape`, if any.
  void erase(const SegmentShape& shape) {
    const auto found = execs_.find(shape);
    if (found == execs_.end()) return;
    destroy_(found->second);
    execs_.erase(found);
  }
  void clear() {
    for (auto& [shape, exec] : execs_) destroy_(exec);
    execs_.clear();
  }
  [[nodiscard]] std::size_t size() const noexcept { return execs_.size(); }

 private:
  std::function<void(Exec)> destroy_;
  std::map<SegmentShape, Exec> execs_;
};

class CaptureFailures {
 public:
  static constexpr std::size_t kLimit = 3;

  // Counts one failure; true exactly once: when this failure turns capture off (the caller logs it).
  bool count() noexcept {
    ++count_;
    return count_ == kLimit;
  }
  [[nodiscard]] bool capture_off() const noexcept { return count_ >= kLimit; }
  [[nodiscard]] std::size_t failures() const noexcept { return count_; }

 private:
  std::size_t count_ = 0;
};

}  // namespace tp::backend::cuda
