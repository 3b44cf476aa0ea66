// The MPI transport (see tensorpool/distribute/mpi.hpp). Cross-worker work runs inside a task on the first
// local tensor's stream 0, so it starts only once the local reduction it follows has run and later work on
// that stream sees its result: the data is staged into pinned host memory, reduced between the workers with
// a non-blocking MPI collective polled against the deadline, and staged back.
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
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
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16:
      return MPI_UINT16_T;
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
    across_workers(tensors[0], "all_reduce", [](void* data, const Tensor& tensor, const Deadline& deadline) {
      MPI_Request request;
      MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(tensor.num_elements()), mpi_type(tensor.dtype()),
                     sum_op(tensor.dtype()), MPI_COMM_WORLD, &request);
      deadline.wait(request, "all_reduce");
    });
    for (std::size_t index = 1; index < tensors.size(); ++index) send(tensors[0], tensors[index]);
  }

  void do_reduce_scatter(std::span<const Tensor> tensors, std::span<const Tensor> scratch) override {
    one_local_tensor(tensors, "reduce_scatter");
    (void)scratch;
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

  // Polls a request until it completes or the collective's deadline passes.
  class Deadline {
   public:
    Deadline(std::chrono::steady_clock::time_point end, std::uint64_t sequence) : end_(end), sequence_(sequence) {}
    void wait(MPI_Request& request, std::string_view what) const {
      int done = 0;
      for (;;) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (done != 0) return;
        detail::serve_probes();
        if (std::chrono::steady_clock::now() > end_) {
          const std::string missing = detail::unresponsive_ranks(std::chrono::seconds(2));
          TP_THROW(DeviceError, "distribute", "rank ", mpi_world().rank, ": mpi ", what, " #", sequence_,
                   " did not finish in time; rank(s) ", missing,
                   " stopped answering (stalled or died); TP_COLLECTIVE_TIMEOUT (seconds) sets how long ranks wait");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }

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

  // Enqueues on `tensor`'s stream 0: stage it to host memory, check that every rank arrived, run `exchange`
  // on the staged bytes, stage the result back. Task errors surface at the stream's next synchronize().
  template <typename Exchange>
  void across_workers(const Tensor& tensor, std::string_view what, Exchange exchange) {
    if (tensor.num_elements() > std::numeric_limits<int>::max()) {
      TP_THROW(InvalidArgument, "distribute", "mpi ", what, ": ", tensor.num_elements(),
               " elements exceed MPI's int counts; split the bucket");
    }
    mpi_type(tensor.dtype());
    if (mpi_world().size == 1) return;
    if (staging_ == nullptr) staging_ = device::StagingPool::create("mpi");
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
  MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

void mpi_barrier(MpiOptions options) {
  if (mpi_world().size == 1) return;
  std::lock_guard lock(detail::mpi_mutex());
  const std::uint64_t sequence = detail::next_sequence();
  detail::arrive(sequence, "barrier", std::chrono::steady_clock::now() + effective_timeout(options));
}

}  // namespace tp::distribute
