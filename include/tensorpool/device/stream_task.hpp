// SPDX-License-Identifier: Apache-2.0
#pragma once
// StreamTask: the work a stream runs, a move-only callable taking no arguments (a std::function without the
// copy and, for small callables, without the heap).
//
// Why not std::function: a host thread launches dozens of kernels per training step, each a task capturing
// its tensors; std::function keeps any callable above two pointers in a heap block, allocated on the host
// thread and freed on the stream's thread once the task has run, and glibc's allocator makes such a
// cross-thread pair much dearer than a same-thread one. A callable of up to kInlineBytes that moves without
// throwing lives inside the StreamTask; a larger one goes to the heap as before.
//
// A task may be bound to a cancel flag (Stream::enqueue binds its kernels and copies to the stream's kept
// error): invoked while the flag is set, it does nothing. The flag travels with the task, so it holds wherever
// a backend invokes the task.

#include <atomic>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace tp::device {

class StreamTask {
 public:
  static constexpr std::size_t kInlineBytes = 448;

  StreamTask() noexcept = default;
  StreamTask(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor): as std::function's

  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, StreamTask> && std::is_invocable_v<std::decay_t<F>&>)
      StreamTask(F&& callable) {  // NOLINT(google-explicit-constructor, bugprone-forwarding-reference-overload)
    using Callable = std::decay_t<F>;
    if constexpr (kFitsInline<Callable>) {
      ::new (static_cast<void*>(storage_)) Callable(std::forward<F>(callable));
      ops_ = &kInlineOps<Callable>;
    } else {
      ::new (static_cast<void*>(storage_)) Callable*(new Callable(std::forward<F>(callable)));
      ops_ = &kHeapOps<Callable>;
    }
  }

  StreamTask(StreamTask&& other) noexcept { take(other); }
  StreamTask& operator=(StreamTask&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  StreamTask& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  StreamTask(const StreamTask&) = delete;
  StreamTask& operator=(const StreamTask&) = delete;
  ~StreamTask() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }

  // Runs the callable, unless the cancel flag is set. Precondition: not empty.
  void operator()() {
    if (cancel_ != nullptr && cancel_->load(std::memory_order_acquire)) return;
    ops_->invoke(storage_);
  }

  // From now on the task does nothing when invoked while `*cancel` is true; `cancel` must outlive the task.
  void cancel_when(const std::atomic<bool>* cancel) noexcept { cancel_ = cancel; }

 private:
  struct Ops {
    void (*invoke)(void* storage);
    void (*relocate)(void* from, void* to) noexcept;  // move-constructs into `to`, destroys `from`
    void (*destroy)(void* storage) noexcept;
  };

  template <typename Callable>
  static constexpr bool kFitsInline =
      sizeof(Callable) <= kInlineBytes &&
      alignof(Callable) <= alignof(std::max_align_t) && std::is_nothrow_move_constructible_v<Callable>;

  template <typename Callable>
  static constexpr Ops kInlineOps{
      [](void* storage) { (*std::launder(static_cast<Callable*>(storage)))(); },
      [](void* from, void* to) noexcept {
        Callable* source = std::launder(static_cast<Callable*>(from));
        ::new (to) Callable(std::move(*source));
        source->~Callable();
      },
      [](void* storage) noexcept { std::launder(static_cast<Callable*>(storage))->~Callable(); }};

  template <typename Callable>
  static constexpr Ops kHeapOps{
      [](void* storage) { (**std::launder(static_cast<Callable**>(storage)))(); },
      [](void* from, void* to) noexcept { ::new (to) Callable*(*std::launder(static_cast<Callable**>(from))); },
      [](void* storage) noexcept { delete *std::launder(static_cast<Callable**>(storage)); }};

  void take(StreamTask& other) noexcept {
    if (other.ops_ == nullptr) return;
    other.ops_->relocate(other.storage_, storage_);
    ops_ = std::exchange(other.ops_, nullptr);
    cancel_ = std::exchange(other.cancel_, nullptr);
  }

  void reset() noexcept {
    if (ops_ == nullptr) return;
    std::exchange(ops_, nullptr)->destroy(storage_);
    cancel_ = nullptr;
  }

  alignas(std::max_align_t) std::byte storage_[kInlineBytes];
  const Ops* ops_ = nullptr;  // null: empty
  const std::atomic<bool>* cancel_ = nullptr;
};

}  // namespace tp::device
