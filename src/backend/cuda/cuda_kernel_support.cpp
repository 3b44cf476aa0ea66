// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cuda_kernel_support.hpp"

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_error.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cuda::support {

kernels::Dtype kernel_dtype(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return kernels::Dtype::f32;
    case DType::f64: return kernels::Dtype::f64;
    case DType::f16: return kernels::Dtype::f16;
    case DType::bf16: return kernels::Dtype::bf16;
    case DType::i32: return kernels::Dtype::i32;
    case DType::i64: return kernels::Dtype::i64;
    case DType::u8: return kernels::Dtype::u8;
    case DType::boolean: return kernels::Dtype::boolean;
  }
  return kernels::Dtype::f32;  // not reached: every DType is listed
}

void check_launch(cudaError_t status, std::string_view kernel) { check(status, kernel); }

void* peer_address(const Tensor& tensor) {
  if (!tensor.defined()) return nullptr;
  // On the command's own device the scope changes nothing: Buffer::data() accepts its own stream's device.
  const device::PeerAccessScope peer(tensor.device());
  return tensor.data();
}

namespace {

struct ScratchRegistry {
  std::mutex mutex;
  std::map<std::pair<cudaStream_t, int>, std::unique_ptr<StreamScratch>> scratch;  // guarded by mutex
};

ScratchRegistry& registry() {
  static ScratchRegistry instance;  // never destroyed before the streams that use it: leaked with the process
  return instance;
}

}  // namespace

StreamScratch& scratch_of(const CudaStream& stream) {
  ScratchRegistry& all = registry();
  const std::lock_guard lock(all.mutex);
  std::unique_ptr<StreamScratch>& entry = all.scratch[{stream.native(), stream.ordinal()}];
  if (entry == nullptr) {
    auto fresh = std::make_unique<StreamScratch>();
    void* device_words = nullptr;
    check(cudaMalloc(&device_words, 2 * sizeof(std::int64_t)), "cudaMalloc (status word)");
    fresh->status_device = static_cast<std::int64_t*>(device_words);
    entry = std::move(fresh);
  }
  return *entry;
}

void* matmul_workspace(StreamScratch& scratch) {
  // Only the stream's own worker touches its scratch's workspace: no lock needed past scratch_of's.
  if (scratch.workspace == nullptr) {
    check(cudaMalloc(&scratch.workspace, kMatmulWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
  }
  return scratch.workspace;
}

namespace {

// Pinned slots are allocated this many at a time (one cudaHostAlloc of a page or so): a stream has at most
// its max_in_flight entries outstanding, so a few chunks cover every check in flight.
constexpr std::size_t kSlotsPerChunk = 64;

// A status slot taken from `scratch` for one check; goes back to the free list when the last copy of the
// check (held by the stream's entry, destroyed on the completer once the device has written the slot) goes.
class StatusSlot {
 public:
  explicit StatusSlot(StreamScratch& scratch) : scratch_(scratch) {
    const std::lock_guard lock(scratch.slots_mutex);
    if (scratch.free_slots.empty()) {
      // Room for every slot there will be, first: the destructor's push_back never allocates.
      scratch.free_slots.reserve(scratch.slot_count + kSlotsPerChunk);
      void* chunk = nullptr;
      check(cudaHostAlloc(&chunk, kSlotsPerChunk * 2 * sizeof(std::int64_t), cudaHostAllocPortable),
            "cudaHostAlloc (label check status slots)");
      // Kept for the process's lifetime, as the scratch that lists them.
      auto* words = static_cast<std::int64_t*>(chunk);
      for (std::size_t slot = 0; slot < kSlotsPerChunk; ++slot) scratch.free_slots.push_back(words + 2 * slot);
      scratch.slot_count += kSlotsPerChunk;
    }
    words_ = scratch.free_slots.back();
    scratch.free_slots.pop_back();
  }
  ~StatusSlot() {
    const std::lock_guard lock(scratch_.slots_mutex);
    scratch_.free_slots.push_back(words_);  // within the capacity reserved for slot_count: cannot throw
  }
  StatusSlot(const StatusSlot&) = delete;
  StatusSlot& operator=(const StatusSlot&) = delete;

  [[nodiscard]] std::int64_t* words() const noexcept { return words_; }

 private:
  StreamScratch& scratch_;
  std::int64_t* words_ = nullptr;
};

}  // namespace

void check_labels(CudaStream& stream, cudaStream_t native, std::string_view op, const Tensor& labels, std::int64_t rows,
                  std::int64_t cols) {
  if (rows == 0) return;
  StreamScratch& scratch = scratch_of(stream);
  // A slot of its own: the single device word is rewritten by the next check's kernel (stream order keeps the
  // copy before it), but the host reads this copy only later, on the completer.
  auto slot = std::make_shared<StatusSlot>(scratch);
  check_launch(kernels::launch_check_labels(labels.data(), labels.dtype() == DType::i64, rows, cols,
                                            scratch.status_device, native),
               "launch_check_labels");
  check(cudaMemcpyAsync(slot->words(), scratch.status_device, 2 * sizeof(std::int64_t), cudaMemcpyDeviceToHost, native),
        "cudaMemcpyAsync (label check)");
  // Registered only once the copy is enqueued: a throw above returns the slot, nothing writes it.
  stream.after_completion([slot, op = std::string(op), cols] {
    const std::int64_t row = slot->words()[0];
    const std::int64_t label = slot->words()[1];
    if (row < 0) return;
    TP_THROW(InvalidArgument, kComponent, op, ": row ", row, " has label ", label,
             ", outside the valid class range [0, ", cols, ") for ", cols, " classes");
  });
}

}  // namespace tp::backend::cuda::support
