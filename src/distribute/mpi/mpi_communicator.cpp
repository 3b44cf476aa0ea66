// SPDX-License-Identifier: Apache-2.0
// The MPI transport (see tensorpool/distribute/mpi.hpp). Cross-worker work runs inside a task on the first
// local tensor's stream 0, so it starts only once the local reduction it follows has run and later work on
// that stream sees its result: the data is staged into pinned host memory, reduced between the workers over
// non-blocking MPI polled against the deadline, and staged back.
//
// All-reduce runs its own pipelined ring on MPI point-to-point messages: each rank's segment of the bucket is
// cut into pieces that travel the ring one by one; a piece is staged in just before it is first sent, a
// reduction reads the device's piece and the received one and writes the sum once (to staging, and to the
// device when final), and all-gathered pieces are staged out as they arrive, so staging overlaps the
// transfers of the other pieces. Large reduce-scatters run the ring's first half.
// (Open MPI's MPI_Iallreduce, libnbc, reduces with a binomial tree below 4 ranks: every byte goes to rank 0
// and back, half the speed of the blocking MPI_Allreduce; the ring moves 2(N-1)/N of the bytes per rank.)
// Buckets below kMpiRingMinimumBytes, where the ring's hops cost more than they save, use MPI's collectives.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "device/staging_pool.hpp"
#include "distribute/mpi/mpi_world.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/half.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/mpi.hpp"

namespace tp::distribute {

namespace {

// MPI has no 16-bit float types: float16 and bfloat16 travel as MPI_UINT16_T and are summed by a user
// operation, in float32 with one rounding per addition (as the in-process ring's add_scaled).
template <typename H>
void sum_16bit(void* in, void* inout, int* length, MPI_Datatype*) {
  const H* addend = static_cast<const H*>(in);
  H* sum = static_cast<H*>(inout);
  for (int i = 0; i < *length; ++i) sum[i] = H::from_float(static_cast<float>(sum[i]) + static_cast<float>(addend[i]));
}

// The ring's reduction fused with its staging: sum[i] = local[i] + addend[i] (as the MPI operation would
// compute it, one rounding per addition), written to the staging block and, once the sum is final, straight
// back to the device's bytes too, so a piece is read and written once instead of copied in, reduced and
// copied out in three passes.
template <typename T>
void stage_sum(const std::byte* local, const std::byte* addend, std::byte* sum, std::byte* device_copy,
               std::int64_t count) {
  const T* a = reinterpret_cast<const T*>(local);
  const T* b = reinterpret_cast<const T*>(addend);
  T* out = reinterpret_cast<T*>(sum);
  T* copy = reinterpret_cast<T*>(device_copy);
  for (std::int64_t i = 0; i < count; ++i) {
    T value;
    if constexpr (std::is_floating_point_v<T>) {
      value = a[i] + b[i];
    } else {
      value = T::from_float(static_cast<float>(a[i]) + static_cast<float>(b[i]));
    }
    out[i] = value;
    if (copy != nullptr) copy[i] = value;
  }
}

void stage_sum(DType dtype, const std::byte* local, const std::byte* addend, std::byte* sum, std::byte* device_copy,
               std::int64_t count) {
  switch (dtype) {
    case DType::f32: return stage_sum<float>(local, addend, sum, device_copy, count);
    case DType::f64: return stage_sum<double>(local, addend, sum, device_copy, count);
    case DType::f16: return stage_sum<Half>(local, addend, sum, device_copy, count);
    case DType::bf16: return stage_sum<BFloat16>(local, addend, sum, device_copy, count);
    default: TP_THROW(InvalidArgument, "distribute", "mpi: cannot sum ", name_of(dtype));
  }
}

template <typename H>
MPI_Op sum_op_16bit() {
  static const MPI_Op op = [] {
    MPI_Op created;
    MPI_Op_create(&sum_16bit<H>, 1, &created);
    return created;
  }();
  return op;
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;
    default:
      TP_THROW(InvalidArgument, "distribute", "mpi: collectives take float32, float64, float16 or bfloat16, not ",
               name_of(dtype));
  }
}

MPI_Op sum_op(DType dtype) {
  if (dtype == DType::f16) return sum_op_16bit<Half>();
  if (dtype == DType::bf16) return sum_op_16bit<BFloat16>();
  return MPI_SUM;
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MpiOptions options)
      : timeout_(effective_timeout(options)), local_(make_communicator("ring")) {
    mpi_world();
  }
  std::string_view name() const noexcept override { return "mpi"; }
  std::int64_t scratch_elements(std::int64_t elements, std::size_t participants, std::size_t index) const override {
    return local_->scratch_elements(elements, participants, index);
  }

 private:
  void do_all_reduce(std::span<const Tensor> tensors, std::span<const Tensor> scratch) override {
    local_->all_reduce(tensors, scratch);
    if (tensors[0].nbytes() < kMpiRingMinimumBytes) {
      across_workers(tensors[0], "all_reduce", [](void* data, const Tensor& tensor, const Deadline& deadline) {
        MPI_Request request;
        MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(tensor.num_elements()), mpi_type(tensor.dtype()),
                       sum_op(tensor.dtype()), MPI_COMM_WORLD, &request);
        deadline.wait(request, "all_reduce");
      });
    } else {
      ring_across_workers(tensors[0], RingPhases::all_reduce);
    }
    for (std::size_t index = 1; index < tensors.size(); ++index) send(tensors[0], tensors[index]);
  }

  void do_reduce_scatter(std::span<const Tensor> tensors, std::span<const Tensor> scratch) override {
    one_local_tensor(tensors, "reduce_scatter");
    (void)scratch;
    // Large buckets take the ring's reduce-scatter phase, which outruns Open MPI's reduce-scatter (blocking or
    // not) at those sizes (tp_collective_bench --collective reduce_scatter; docs/benchmarks.md, "All-reduce bus
    // bandwidth").
    if (tensors[0].nbytes() >= kMpiRingMinimumBytes) {
      ring_across_workers(tensors[0], RingPhases::reduce_scatter);
      return;
    }
    across_workers(tensors[0], "reduce_scatter", [](void* data, const Tensor& tensor, const Deadline& deadline) {
      const std::vector<int> counts = worker_counts(tensor.num_elements());
      MPI_Request request;
      const int rank = mpi_world().rank;
      const auto [begin, end] = chunk(tensor.num_elements(), counts.size(), static_cast<std::size_t>(rank));
      std::vector<std::byte> received(static_cast<std::size_t>(end - begin) * size_of(tensor.dtype()));
      MPI_Ireduce_scatter(data, received.data(), counts.data(), mpi_type(tensor.dtype()), sum_op(tensor.dtype()),
                          MPI_COMM_WORLD, &request);
      deadline.wait(request, "reduce_scatter");
      std::memcpy(static_cast<std::byte*>(data) + static_cast<std::size_t>(begin) * size_of(tensor.dtype()),
                  received.data(), received.size());
    });
  }

  std::size_t participants(std::size_t local) const override {
    return local * static_cast<std::size_t>(mpi_world().size);
  }

  // The root worker first spreads the root tensor to its other devices; the others receive it on their first
  // device (staged, MPI_Ibcast polled against the deadline) and then spread it.
  void do_broadcast(std::span<const Tensor> tensors, std::size_t root) override {
    const std::size_t locals = tensors.size();
    const auto root_rank = static_cast<int>(root / locals);
    const std::size_t source = root_rank == mpi_world().rank ? root % locals : 0;
    if (root_rank == mpi_world().rank) Communicator::do_broadcast(tensors, source);
    across_workers(tensors[source], "broadcast",
                   [root_rank](void* data, const Tensor& tensor, const Deadline& deadline) {
                     MPI_Request request;
                     MPI_Ibcast(data, static_cast<int>(tensor.num_elements()), mpi_type(tensor.dtype()), root_rank,
                                MPI_COMM_WORLD, &request);
                     deadline.wait(request, "broadcast");
                   });
    if (root_rank != mpi_world().rank) Communicator::do_broadcast(tensors, 0);
  }

  void do_all_gather(std::span<const Tensor> tensors) override {
    one_local_tensor(tensors, "all_gather");
    across_workers(tensors[0], "all_gather", [](void* data, const Tensor& tensor, const Deadline& deadline) {
      const std::vector<int> counts = worker_counts(tensor.num_elements());
      std::vector<int> displacements(counts.size(), 0);
      for (std::size_t rank = 1; rank < counts.size(); ++rank)
        displacements[rank] = displacements[rank - 1] + counts[rank - 1];
      MPI_Request request;
      MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displacements.data(),
                      mpi_type(tensor.dtype()), MPI_COMM_WORLD, &request);
      deadline.wait(request, "all_gather");
    });
  }

  // A collective's deadline: waits poll their request against it (detail::wait_for).
  class Deadline {
   public:
    Deadline(std::chrono::steady_clock::time_point end, std::uint64_t sequence) : end_(end), sequence_(sequence) {}
    void wait(MPI_Request& request, std::string_view what) const { detail::wait_for(request, end_, sequence_, what); }

   private:
    std::chrono::steady_clock::time_point end_;
    std::uint64_t sequence_;
  };

  static void one_local_tensor(std::span<const Tensor> tensors, std::string_view what) {
    if (tensors.size() != 1) {
      TP_THROW(InvalidArgument, "distribute", "mpi ", what, " shards per worker and takes one tensor per worker, not ",
               tensors.size(), "; run one device per worker (mpirun -np <devices>)");
    }
  }

  static std::vector<int> worker_counts(std::int64_t elements) {
    const auto workers = static_cast<std::size_t>(mpi_world().size);
    std::vector<int> counts;
    for (std::size_t rank = 0; rank < workers; ++rank) {
      const auto [begin, end] = chunk(elements, workers, rank);
      counts.push_back(static_cast<int>(end - begin));
    }
    return counts;
  }

  static void send(const Tensor& source, const Tensor& target) {
    device::copy(source.device().stream(0), source.buffer(), source.offset_bytes(), target.device().stream(0),
                 target.buffer(), target.offset_bytes(), target.nbytes());
  }

  // The ring's piece: small enough that a piece staged in is still in cache when it is sent or reduced, large
  // enough that MPI's per-message cost stays small. Buckets below kMpiRingMinimumBytes use MPI's own collectives:
  // for small buckets the ring at best ties MPI_Iallreduce in tp_collective_bench and loses in training, while
  // for large ones it wins in both (the crossover: docs/benchmarks.md, "All-reduce bus bandwidth").
  static constexpr std::size_t kPieceBytes = std::size_t{1} << 20;
  static constexpr int kRingTag = 8000;  // + the ring step (0 .. 2(N-1)); other MPI traffic uses 7001..7102

  // all_reduce: both halves of the ring; reduce_scatter: its first N-1 steps, after which rank r holds the sum
  // of Communicator::chunk(n, N, r) (the rest of its tensor is as before: working space).
  enum class RingPhases { all_reduce, reduce_scatter };

  // Enqueues on `tensor`'s stream 0: check that every rank arrived, then run the pipelined ring, which stages
  // the tensor in and out piece by piece. Task errors surface at the stream's next synchronize().
  void ring_across_workers(const Tensor& tensor, RingPhases phases) {
    const std::string_view what = phases == RingPhases::all_reduce ? "all_reduce" : "reduce_scatter";
    if (!ready_across_workers(tensor, what)) return;
    const auto ranks = static_cast<std::size_t>(mpi_world().size);
    const auto [first, first_end] = chunk(tensor.num_elements(), ranks, 0);
    const std::size_t segment_bytes = static_cast<std::size_t>(first_end - first) * size_of(tensor.dtype());
    std::shared_ptr<void> staged = staging_->acquire(std::max<std::size_t>(tensor.nbytes(), 1));
    std::shared_ptr<void> received = staging_->acquire(std::max<std::size_t>(segment_bytes, 1));
    const std::chrono::milliseconds timeout = timeout_;
    tensor.device().stream(0).enqueue([tensor, staged, received, timeout, phases, what] {
      std::lock_guard lock(detail::mpi_mutex());
      const std::uint64_t sequence = detail::next_sequence();
      const auto end = std::chrono::steady_clock::now() + timeout;
      detail::arrive(sequence, what, end);
      try {
        ring(tensor, phases, static_cast<std::byte*>(staged.get()), static_cast<std::byte*>(received.get()),
             Deadline(end, sequence), what);
      } catch (...) {
        // MPI may still write into the blocks (a stalled peer can wake up): keep them out of the pool. MPI is
        // marked broken by then and the process aborts the job at exit.
        static std::vector<std::shared_ptr<void>> abandoned;
        abandoned.push_back(staged);
        abandoned.push_back(received);
        throw;
      }
    });
  }

  // The ring on MPI point-to-point: 2(N-1) steps for all_reduce, the first N-1 for reduce_scatter; at step t a
  // rank sends segment sent(t) to the next rank and receives segment received(t) from the previous one, summing
  // it into its own (t < N-1, reduce-scatter: afterwards segment rank + 1 + shift is final; shift is -1 for
  // reduce_scatter, so that rank r ends with chunk r, and 0 for all_reduce) or storing it (all-gather). Segments are
  // cut into pieces of kPieceBytes; a piece is forwarded to the next step as soon as it is received (and reduced), so
  // the pieces of a segment travel the ring one behind the other. Invariants: `staged` holds the tensor's
  // bytes where they have been staged in (a rank's own segment before step 0, every other segment at its
  // reduction); a piece is staged out once final; no receive is posted into bytes a pending send reads.
  static void ring(const Tensor& tensor, RingPhases phases, std::byte* staged, std::byte* received,
                   const Deadline& deadline, std::string_view what) {
    const int ranks = mpi_world().size;
    const int rank = mpi_world().rank;
    const int steps = phases == RingPhases::all_reduce ? 2 * (ranks - 1) : ranks - 1;
    const int shift = phases == RingPhases::all_reduce ? 0 : -1;
    const std::size_t element_bytes = size_of(tensor.dtype());
    const MPI_Datatype type = mpi_type(tensor.dtype());
    auto* data = static_cast<std::byte*>(tensor.data());
    const auto piece_elements = static_cast<std::int64_t>(std::max<std::size_t>(kPieceBytes / element_bytes, 1));
    const auto wrap = [ranks](int segment) { return ((segment % ranks) + ranks) % ranks; };
    const int own = rank + shift;  // the segment this rank sends first
    const auto received_segment = [&](int step) {
      return step < ranks - 1 ? wrap(own - step - 1) : wrap(own - (step - (ranks - 1)));
    };
    const auto sent_segment = [&](int step) { return step == 0 ? wrap(own) : received_segment(step - 1); };
    // The pieces of `segment` as [begin, end) element ranges.
    const auto pieces = [&](int segment) {
      const auto [begin, end] =
          chunk(tensor.num_elements(), static_cast<std::size_t>(ranks), static_cast<std::size_t>(segment));
      std::vector<std::pair<std::int64_t, std::int64_t>> result;
      for (std::int64_t at = begin; at < end; at += piece_elements)
        result.emplace_back(at, std::min(end, at + piece_elements));
      return result;
    };
    const auto bytes = [element_bytes](std::int64_t elements) {
      return static_cast<std::size_t>(elements) * element_bytes;
    };
    std::vector<std::vector<MPI_Request>> sends(static_cast<std::size_t>(steps));
    const auto send = [&](int step, std::pair<std::int64_t, std::int64_t> piece) {
      if (step >= steps) return;
      MPI_Request request;
      MPI_Isend(staged + bytes(piece.first), static_cast<int>(piece.second - piece.first), type, (rank + 1) % ranks,
                kRingTag + step, MPI_COMM_WORLD, &request);
      sends[static_cast<std::size_t>(step)].push_back(request);
    };
    const auto wait_sends = [&](int step) {
      for (MPI_Request& request : sends[static_cast<std::size_t>(step)]) deadline.wait(request, what);
      sends[static_cast<std::size_t>(step)].clear();
    };
    for (const auto& piece : pieces(sent_segment(0))) {
      std::memcpy(staged + bytes(piece.first), data + bytes(piece.first), bytes(piece.second - piece.first));
      send(0, piece);
    }
    std::vector<MPI_Request> receives;
    for (int step = 0; step < steps; ++step) {
      const int segment = received_segment(step);
      const bool reduce = step < ranks - 1;
      const bool final = step >= ranks - 2;
      const auto segment_pieces = pieces(segment);
      if (segment_pieces.empty()) continue;
      const std::int64_t segment_begin = segment_pieces.front().first;
      if (!reduce) {
        for (int earlier = 0; earlier < step; ++earlier) {
          if (sent_segment(earlier) == segment) wait_sends(earlier);
        }
      }
      receives.assign(segment_pieces.size(), MPI_REQUEST_NULL);
      for (std::size_t index = 0; index < segment_pieces.size(); ++index) {
        const auto [begin, end] = segment_pieces[index];
        std::byte* target = reduce ? received + bytes(begin - segment_begin) : staged + bytes(begin);
        MPI_Irecv(target, static_cast<int>(end - begin), type, (rank + ranks - 1) % ranks, kRingTag + step,
                  MPI_COMM_WORLD, &receives[index]);
      }
      for (std::size_t index = 0; index < segment_pieces.size(); ++index) {
        const auto [begin, end] = segment_pieces[index];
        deadline.wait(receives[index], what);
        if (reduce) {
          stage_sum(tensor.dtype(), data + bytes(begin), received + bytes(begin - segment_begin), staged + bytes(begin),
                    final ? data + bytes(begin) : nullptr, end - begin);
        } else if (final) {
          std::memcpy(data + bytes(begin), staged + bytes(begin), bytes(end - begin));
        }
        send(step + 1, segment_pieces[index]);
      }
    }
    for (int step = 0; step < steps; ++step) wait_sends(step);
  }

  // Checks `tensor` for the MPI transport; false when there is nothing to exchange (a world of one).
  bool ready_across_workers(const Tensor& tensor, std::string_view what) {
    if (tensor.num_elements() > std::numeric_limits<int>::max()) {
      TP_THROW(InvalidArgument, "distribute", "mpi ", what, ": ", tensor.num_elements(),
               " elements exceed MPI's int counts; split the bucket");
    }
    mpi_type(tensor.dtype());
    if (mpi_world().size == 1) return false;
    if (staging_ == nullptr) staging_ = device::StagingPool::create("mpi");
    return true;
  }

  // Enqueues on `tensor`'s stream 0: stage it to host memory, check that every rank arrived, run `exchange`
  // on the staged bytes, stage the result back. Task errors surface at the stream's next synchronize().
  template <typename Exchange>
  void across_workers(const Tensor& tensor, std::string_view what, Exchange exchange) {
    if (!ready_across_workers(tensor, what)) return;
    std::shared_ptr<void> staged = staging_->acquire(std::max<std::size_t>(tensor.nbytes(), 1));
    const std::chrono::milliseconds timeout = timeout_;
    tensor.device().stream(0).enqueue([tensor, staged, what, exchange, timeout] {
      std::memcpy(staged.get(), tensor.data(), tensor.nbytes());
      {
        std::lock_guard lock(detail::mpi_mutex());
        const std::uint64_t sequence = detail::next_sequence();
        const auto end = std::chrono::steady_clock::now() + timeout;
        detail::arrive(sequence, what, end);
        exchange(staged.get(), tensor, Deadline(end, sequence));
      }
      std::memcpy(tensor.data(), staged.get(), tensor.nbytes());
    });
  }

  const std::chrono::milliseconds timeout_;
  const std::unique_ptr<Communicator> local_;  // the ring between this worker's devices
  std::shared_ptr<device::StagingPool> staging_;
};

}  // namespace

bool mpi_built() { return true; }

std::unique_ptr<Communicator> make_mpi_communicator(MpiOptions options) {
  return std::make_unique<MpiCommunicator>(options);
}

void mpi_sum(double* values, int count) {
  if (mpi_world().size == 1) return;
  std::lock_guard lock(detail::mpi_mutex());
  const std::uint64_t sequence = detail::next_sequence();
  const auto end = std::chrono::steady_clock::now() + effective_timeout({});
  detail::arrive(sequence, "sum", end);
  MPI_Request request;  // non-blocking: a rank that stalls inside the sum is named, not waited for forever
  MPI_Iallreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request);
  detail::wait_for(request, end, sequence, "sum");
}

void mpi_barrier(MpiOptions options) {
  if (mpi_world().size == 1) return;
  std::lock_guard lock(detail::mpi_mutex());
  const std::uint64_t sequence = detail::next_sequence();
  detail::arrive(sequence, "barrier", std::chrono::steady_clock::now() + effective_timeout(options));
}

}  // namespace tp::distribute
