// SPDX-License-Identifier: Apache-2.0
// The "nccl" communicator (tensorpool/distribute/nccl.hpp).
//
// Launch protocol: a collective enqueues one command task on each participant's stream 0. Each task, on its
// stream's worker, notes its tensor's device address and its native stream, and waits for the others; the
// last to arrive issues every participant's NCCL call inside one ncclGroupStart/End (NCCL's rule for several
// devices driven from one thread) and releases them. Every earlier command of each stream is then already on
// its CUDA stream, and no later one is enqueued before the NCCL work, so the collective sits in each stream's
// order. A participant that never arrives (its stream failed) makes the others fail after the collective
// timeout (TP_COLLECTIVE_TIMEOUT) with a tp::DeviceError naming it, instead of a hang.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_error.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda/nccl_library.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/distribute/nccl.hpp"

namespace tp::distribute {

namespace {

namespace nccl = backend::cuda::nccl;
using backend::cuda::CudaStream;

int nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return nccl::kFloat32;
    case DType::f16: return nccl::kFloat16;
    case DType::bf16: return nccl::kBfloat16;
    case DType::f64: return nccl::kFloat64;
    default: break;
  }
  TP_THROW(InvalidArgument, "nccl", "the nccl communicator sums float32, float16, bfloat16 or float64, not ",
           name_of(dtype));
}

// The job's shape: this process's rank and the number of processes (1 without a launcher).
struct Job {
  int rank = 0;
  int workers = 1;
};

Job job() {
  if (launcher_world_size().value_or(1) <= 1) return {};
  const MpiWorld& world = mpi_world();
  return {world.rank, world.size};
}

// One communicator per local GPU (index = local participant), for the GPUs `ordinals` of every worker.
class CommunicatorSet {
 public:
  static const std::vector<nccl::Comm_t>& of(const nccl::Library& library, const std::vector<int>& ordinals,
                                             const Job& job) {
    static std::mutex mutex;
    // Leaked on purpose: NCCL's communicators are released by the process's exit (destroying them from a static
    // destructor would run after the CUDA runtime unloaded).
    static auto* sets = new std::map<std::vector<int>, std::vector<nccl::Comm_t>>();  // NOLINT
    const std::scoped_lock lock(mutex);
    auto found = sets->find(ordinals);
    if (found != sets->end()) return found->second;
    return sets->emplace(ordinals, make(library, ordinals, job)).first->second;
  }

 private:
  static std::vector<nccl::Comm_t> make(const nccl::Library& library, const std::vector<int>& ordinals,
                                        const Job& job) {
    const auto local = static_cast<int>(ordinals.size());
    std::vector<nccl::Comm_t> comms(ordinals.size(), nullptr);
    if (job.workers <= 1) {
      nccl::check(library, library.CommInitAll(comms.data(), local, ordinals.data()), "ncclCommInitAll");
      return comms;
    }
    std::vector<int> counts(static_cast<std::size_t>(job.workers), 0);
    mpi_all_gather(&local, sizeof(local), counts.data());
    if (std::any_of(counts.begin(), counts.end(), [local](int count) { return count != local; })) {
      TP_THROW(InvalidArgument, "nccl", "every worker of an nccl job takes the same number of devices; rank ", job.rank,
               " has ", local, " and another has ",
               *std::find_if(counts.begin(), counts.end(), [local](int count) { return count != local; }));
    }
    nccl::UniqueId id{};
    if (job.rank == 0) nccl::check(library, library.GetUniqueId(&id), "ncclGetUniqueId");
    mpi_broadcast(&id, sizeof(id), 0);
    int current = 0;
    backend::cuda::check(cudaGetDevice(&current), "cudaGetDevice");
    nccl::check(library, library.GroupStart(), "ncclGroupStart");
    for (int index = 0; index < local; ++index) {
      backend::cuda::check(cudaSetDevice(ordinals[static_cast<std::size_t>(index)]), "cudaSetDevice");
      nccl::check(library,
                  library.CommInitRank(&comms[static_cast<std::size_t>(index)], job.workers * local, id,
                                       job.rank * local + index),
                  "ncclCommInitRank");
    }
    nccl::check(library, library.GroupEnd(), "ncclGroupEnd (ncclCommInitRank)");
    backend::cuda::check(cudaSetDevice(current), "cudaSetDevice");
    return comms;
  }
};

// What the last participant to arrive issues for participant `index`: its address, stream and communicator.
struct Slot {
  void* address = nullptr;
  cudaStream_t stream = nullptr;
  nccl::Comm_t comm = nullptr;
};
using Issue = std::function<void(const nccl::Library&, const Slot&, std::size_t index)>;

struct Launch {
  std::mutex mutex;
  std::condition_variable released;
  std::vector<Slot> slots;
  std::size_t arrived = 0;
  bool done = false;
  std::exception_ptr error;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator() : library_(nccl::library()), job_(job()) {}  // fails now when NCCL is missing

  std::string_view name() const noexcept override { return "nccl"; }
  std::int64_t scratch_elements(std::int64_t, std::size_t, std::size_t) const override { return 0; }

 protected:
  std::size_t participants(std::size_t local) const override { return local * static_cast<std::size_t>(job_.workers); }

  void do_broadcast(std::span<const Tensor> tensors, std::size_t root) override {
    const std::int64_t elements = tensors[0].num_elements();
    const int type = nccl_type(tensors[0].dtype());
    launch("ncclBroadcast", tensors, [=](const nccl::Library& library, const Slot& slot, std::size_t) {
      nccl::check(library,
                  library.Broadcast(slot.address, slot.address, static_cast<std::size_t>(elements), type,
                                    static_cast<int>(root), slot.comm, slot.stream),
                  "ncclBroadcast");
    });
  }

 private:
  void do_all_reduce(std::span<const Tensor> tensors, std::span<const Tensor>) override {
    const std::int64_t elements = tensors[0].num_elements();
    const int type = nccl_type(tensors[0].dtype());
    launch("ncclAllReduce", tensors, [=](const nccl::Library& library, const Slot& slot, std::size_t) {
      nccl::check(library,
                  library.AllReduce(slot.address, slot.address, static_cast<std::size_t>(elements), type, nccl::kSum,
                                    slot.comm, slot.stream),
                  "ncclAllReduce");
    });
  }

  // Calls call(at, count, owner) for each non-empty chunk of `elements` items of `item` bytes at `base`, split
  // among `total` owners as Communicator::chunk splits them: the uneven reduce-scatter and all-gather.
  template <typename Call>
  static void for_each_chunk(void* base, std::int64_t elements, std::size_t total, std::size_t item, Call call) {
    for (std::size_t owner = 0; owner < total; ++owner) {
      const auto [begin, end] = chunk(elements, total, owner);
      if (begin == end) continue;
      call(static_cast<char*>(base) + (static_cast<std::size_t>(begin) * item), static_cast<std::size_t>(end - begin),
           static_cast<int>(owner));
    }
  }

  // Equal chunks: NCCL's in-place reduce-scatter (participant g receives at its chunk's place in its own
  // buffer). Otherwise one in-place ncclReduce per non-empty chunk, rooted at its owner, in the same group.
  void do_reduce_scatter(std::span<const Tensor> tensors, std::span<const Tensor>) override {
    const std::int64_t elements = tensors[0].num_elements();
    const std::size_t total = participants(tensors.size());
    const int type = nccl_type(tensors[0].dtype());
    const std::size_t item = size_of(tensors[0].dtype());
    const std::size_t first = first_participant(tensors.size());
    if (elements % static_cast<std::int64_t>(total) == 0) {
      const auto chunk = static_cast<std::size_t>(elements) / total;
      launch("ncclReduceScatter", tensors, [=](const nccl::Library& library, const Slot& slot, std::size_t index) {
        char* base = static_cast<char*>(slot.address);
        nccl::check(library,
                    library.ReduceScatter(base, base + ((first + index) * chunk * item), chunk, type, nccl::kSum,
                                          slot.comm, slot.stream),
                    "ncclReduceScatter");
      });
      return;
    }
    launch("ncclReduce", tensors, [=](const nccl::Library& library, const Slot& slot, std::size_t) {
      for_each_chunk(slot.address, elements, total, item, [&](char* at, std::size_t count, int owner) {
        nccl::check(library, library.Reduce(at, at, count, type, nccl::kSum, owner, slot.comm, slot.stream),
                    "ncclReduce");
      });
    });
  }

  // Equal chunks: NCCL's in-place all-gather; otherwise one in-place ncclBroadcast per non-empty chunk from
  // its owner, in the same group.
  void do_all_gather(std::span<const Tensor> tensors) override {
    const std::int64_t elements = tensors[0].num_elements();
    const std::size_t total = participants(tensors.size());
    const int type = nccl_type(tensors[0].dtype());
    const std::size_t item = size_of(tensors[0].dtype());
    const std::size_t first = first_participant(tensors.size());
    if (elements % static_cast<std::int64_t>(total) == 0) {
      const auto chunk = static_cast<std::size_t>(elements) / total;
      launch("ncclAllGather", tensors, [=](const nccl::Library& library, const Slot& slot, std::size_t index) {
        char* base = static_cast<char*>(slot.address);
        nccl::check(
            library,
            library.AllGather(base + ((first + index) * chunk * item), base, chunk, type, slot.comm, slot.stream),
            "ncclAllGather");
      });
      return;
    }
    launch("ncclBroadcast", tensors, [=](const nccl::Library& library, const Slot& slot, std::size_t) {
      for_each_chunk(slot.address, elements, total, item, [&](char* at, std::size_t count, int owner) {
        nccl::check(library, library.Broadcast(at, at, count, type, owner, slot.comm, slot.stream), "ncclBroadcast");
      });
    });
  }

  // This worker's first participant among the job's.
  std::size_t first_participant(std::size_t local) const { return local * static_cast<std::size_t>(job_.rank); }

  // The GPUs of the participants, each a cuda device's stream 0 on a GPU of its own.
  static std::vector<int> ordinals_of(std::span<const Tensor> tensors) {
    std::vector<int> ordinals;
    for (std::size_t index = 0; index < tensors.size(); ++index) {
      const CudaStream& stream = backend::cuda::cuda_stream(tensors[index].device().stream(0));
      for (std::size_t other = 0; other < index; ++other) {
        if (ordinals[other] == stream.ordinal()) {
          TP_THROW(InvalidArgument, "nccl", "participants ", other, " (", tensors[other].device().name(), ") and ",
                   index, " (", tensors[index].device().name(), ") are both on GPU ", stream.ordinal(),
                   ": NCCL takes one participant per GPU; logical devices sharing a GPU use --all-reduce ring");
        }
      }
      ordinals.push_back(stream.ordinal());
    }
    return ordinals;
  }

  void launch(std::string_view call, std::span<const Tensor> tensors, Issue issue) const {
    const std::vector<nccl::Comm_t>& comms = CommunicatorSet::of(library_, ordinals_of(tensors), job_);
    auto state = std::make_shared<Launch>();
    state->slots.resize(tensors.size());
    const std::chrono::milliseconds timeout = effective_timeout();
    const auto shared_issue = std::make_shared<const Issue>(std::move(issue));
    const std::string what(call);
    // Every participant's task of one collective is enqueued before any of another's: two collectives started
    // from two threads (the executor's inter-op threads) then reach every stream in the same order, as the
    // rendezvous (and NCCL itself: the same order on every communicator) needs; interleaved, stream A could
    // hold collective 1 before 2 and stream B 2 before 1, each worker waiting for the other.
    static std::mutex enqueue_order;
    const std::scoped_lock ordered(enqueue_order);
    for (std::size_t index = 0; index < tensors.size(); ++index) {
      CudaStream& stream = backend::cuda::cuda_stream(tensors[index].device().stream(0));
      // Eager, never captured into a CUDA graph (cuda_graphs.hpp): the task meets the other participants' workers
      // and must arrive exactly once; a capture's eager rerun would arrive twice, and the last arrival issues
      // onto the other streams, which are not this worker's capture.
      stream.enqueue_eager_commands([state, shared_issue, index, timeout, what, library = &library_,
                                     comm = comms[index], tensor = tensors[index], stream = &stream]() {
        // A guard for the contract above: refused before arriving, should the stream ever capture it.
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        backend::cuda::check(cudaStreamIsCapturing(stream->native(), &capture), "cudaStreamIsCapturing");
        if (capture != cudaStreamCaptureStatusNone) {
          TP_THROW(DeviceError, "nccl", what, " is not captured into a CUDA graph; it runs eagerly");
        }
        std::unique_lock lock(state->mutex);
        state->slots[index] = {tensor.data(), stream->native(), comm};
        if (++state->arrived == state->slots.size()) {
          try {
            // NCCL switches devices while it issues for several; this worker's stream keeps its own current.
            int current = 0;
            backend::cuda::check(cudaGetDevice(&current), "cudaGetDevice");
            nccl::check(*library, library->GroupStart(), "ncclGroupStart");
            std::exception_ptr refused;  // a call refused inside the group still ends it
            try {
              for (std::size_t slot = 0; slot < state->slots.size(); ++slot) {
                (*shared_issue)(*library, state->slots[slot], slot);
              }
            } catch (...) {
              refused = std::current_exception();
            }
            const nccl::Result ended = library->GroupEnd();
            backend::cuda::check(cudaSetDevice(current), "cudaSetDevice");
            if (refused) std::rethrow_exception(refused);
            nccl::check(*library, ended, "ncclGroupEnd (" + what + ")");
          } catch (...) {
            state->error = std::current_exception();
          }
          state->done = true;
          state->released.notify_all();
        } else if (!state->released.wait_for(lock, timeout, [&state] { return state->done; })) {
          TP_THROW(DeviceError, "nccl", what, ": participant ", index, " waited ", timeout.count(), " ms for ",
                   state->slots.size() - state->arrived,
                   " others to reach the collective on their streams (a stream that failed earlier skips it)");
        }
        if (state->error) std::rethrow_exception(state->error);
      });
    }
  }

  const nccl::Library& library_;
  Job job_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator() { return std::make_unique<NcclCommunicator>(); }

std::string nccl_version() { return nccl::version(); }

}  // namespace tp::distribute
