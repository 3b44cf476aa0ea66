// SPDX-License-Identifier: Apache-2.0
// The MPI transport, run by ctest both alone (a world of one) and under `mpirun -np 2` (and 3): every rank
// contributes rank-dependent values on one or two local sim devices; all-reduce leaves everyone the sum over
// all ranks and devices, reduce-scatter each rank its chunk's sum, all-gather every rank every chunk, broadcast
// every tensor the root's; the host-side sum and barrier agree; bad inputs are refused naming them.
#include <gtest/gtest.h>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/communicator.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/ops/cast.hpp"

// Open MPI's plugins (dlopened, unloaded by MPI_Finalize) keep allocations by design; LeakSanitizer sees them
// only as "<unknown module>", which no suppression can name, so leak checking is off in this binary (address
// errors are still caught; our own code's leaks are checked by every other test binary).
extern "C" const char* __asan_default_options();
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }

namespace tp::distribute {
namespace {

using device::testing::Backend;
using device::testing::make_device;

// Element i of local tensor `local` on rank r.
float value_of(int rank, std::size_t local, std::int64_t i) {
  return static_cast<float>(rank + 1) * 0.5F + static_cast<float>(local) * 0.25F + static_cast<float>(i % 7);
}

// Small buckets go through MPI_Iallreduce; from kMpiRingMinimumBytes on the pipelined ring (1 MiB pieces), here
// with element counts that leave a short last piece in every segment and segments of unequal length (the
// count above the threshold is odd, then 1,000,003 more: a prime). Every dtype, one and two local devices.
// Values repeat with period 1009 in float32 and float64, 7 in the 16-bit types (multiples of 1/4 below 64,
// exact, so every dtype must give the exact sum; MPI sums float16 and bfloat16 with a user operation), and
// neither period divides a piece or a segment offset: a piece sent to the wrong place or summed twice shows.
TEST(MpiCommunicator, AllReduceSumsOverEveryRankAndLocalDevice) {
  const MpiWorld& world = mpi_world();
  std::vector<std::unique_ptr<device::Device>> devices;
  for (int index = 0; index < 2; ++index) devices.push_back(make_device(Backend::sim, 256 * kMiB, {}, index));
  const auto communicator = make_communicator("mpi");
  EXPECT_EQ(communicator->name(), "mpi");
  for (const DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const std::int64_t period = size_of(dtype) == 2 ? 7 : 1009;
    const auto value = [period](int rank, std::size_t local, std::int64_t i) {
      return static_cast<float>(rank + 1) * 0.5F + static_cast<float>(local) * 0.25F + static_cast<float>(i % period);
    };
    const auto threshold = static_cast<std::int64_t>(kMpiRingMinimumBytes / size_of(dtype));
    for (const std::int64_t elements :
         {std::int64_t{1}, std::int64_t{5}, std::int64_t{1000}, threshold + 1, threshold + 1'000'003}) {
      for (std::size_t locals : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << name_of(dtype) << " locals " << locals << " elements " << elements);
        std::vector<Tensor> tensors, scratch;
        for (std::size_t local = 0; local < locals; ++local) {
          std::vector<float> values(static_cast<std::size_t>(elements));
          for (std::int64_t i = 0; i < elements; ++i) values[static_cast<std::size_t>(i)] = value(world.rank, local, i);
          tensors.push_back(ops::cast(Tensor::from_vector<float>(values, Shape{elements}, *devices[local]), dtype));
          scratch.push_back(
              Tensor::empty(Shape{std::max<std::int64_t>(1, communicator->scratch_elements(elements, locals, local))},
                            dtype, *devices[local]));
        }
        communicator->all_reduce(tensors, scratch);
        for (std::size_t local = 0; local < locals; ++local) {
          const std::vector<float> result = ops::cast(tensors[local], DType::f32).to_vector<float>();
          for (std::int64_t i = 0; i < elements; ++i) {
            double expected = 0;
            for (int rank = 0; rank < world.size; ++rank) {
              for (std::size_t other = 0; other < locals; ++other) expected += value(rank, other, i);
            }
            ASSERT_EQ(result[static_cast<std::size_t>(i)], expected) << "element " << i << " of local " << local;
          }
        }
      }
    }
  }
}

// Small buckets go through MPI's own collectives; from kMpiRingMinimumBytes on the reduce-scatter takes the
// pipelined ring's first half (odd counts, so the chunks and the 1 MiB pieces are unequal). The values are exact
// in every dtype.
TEST(MpiCommunicator, ReduceScatterAndAllGatherWorkPerRank) {
  const MpiWorld& world = mpi_world();
  auto device = make_device(Backend::sim, 256 * kMiB, {}, 0);
  const auto communicator = make_mpi_communicator();
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const auto threshold = static_cast<std::int64_t>(kMpiRingMinimumBytes / size_of(dtype));
    for (std::int64_t elements :
         {std::int64_t{1}, std::int64_t{7}, std::int64_t{1000}, threshold + 1, threshold + 1000003}) {
      SCOPED_TRACE(::testing::Message() << name_of(dtype) << " elements " << elements);
      std::vector<float> values(static_cast<std::size_t>(elements));
      for (std::int64_t i = 0; i < elements; ++i) values[static_cast<std::size_t>(i)] = value_of(world.rank, 0, i);
      std::vector<Tensor> tensors = {ops::cast(Tensor::from_vector<float>(values, Shape{elements}, *device), dtype)};
      std::vector<Tensor> scratch = {Tensor::empty(Shape{1}, dtype, *device)};
      communicator->reduce_scatter(tensors, scratch);
      const auto [begin, end] =
          Communicator::chunk(elements, static_cast<std::size_t>(world.size), static_cast<std::size_t>(world.rank));
      const std::vector<float> reduced = ops::cast(tensors[0], DType::f32).to_vector<float>();
      const auto expected = [&](std::int64_t i) {
        double sum = 0;
        for (int rank = 0; rank < world.size; ++rank) sum += value_of(rank, 0, i);
        return sum;
      };
      for (std::int64_t i = begin; i < end; ++i) {
        ASSERT_EQ(reduced[static_cast<std::size_t>(i)], expected(i)) << "element " << i;
      }
      communicator->all_gather(tensors);
      const std::vector<float> gathered = ops::cast(tensors[0], DType::f32).to_vector<float>();
      for (std::int64_t i = 0; i < elements; ++i) {
        ASSERT_EQ(gathered[static_cast<std::size_t>(i)], expected(i)) << "element " << i;
      }
    }
  }
}

// The root counts every worker's tensors (rank x locals + local): each root of the job, with one and two local
// devices, reaches every tensor of every rank.
TEST(MpiCommunicator, BroadcastReachesEveryTensorOfEveryRank) {
  const MpiWorld& world = mpi_world();
  std::vector<std::unique_ptr<device::Device>> devices;
  for (int index = 0; index < 2; ++index) devices.push_back(make_device(Backend::sim, 64 * kMiB, {}, index));
  const auto communicator = make_mpi_communicator();
  for (std::size_t locals : {1, 2}) {
    const std::size_t participants = locals * static_cast<std::size_t>(world.size);
    for (std::size_t root = 0; root < participants; ++root) {
      SCOPED_TRACE(::testing::Message() << "locals " << locals << " root " << root);
      const std::int64_t elements = 1001;
      std::vector<Tensor> tensors;
      for (std::size_t local = 0; local < locals; ++local) {
        std::vector<float> values(static_cast<std::size_t>(elements));
        for (std::int64_t i = 0; i < elements; ++i)
          values[static_cast<std::size_t>(i)] = value_of(world.rank, local, i);
        tensors.push_back(Tensor::from_vector<float>(values, Shape{elements}, *devices[local]));
      }
      communicator->broadcast(tensors, root);
      const auto root_rank = static_cast<int>(root / locals);
      for (std::size_t local = 0; local < locals; ++local) {
        const std::vector<float> result = tensors[local].to_vector<float>();
        for (std::int64_t i = 0; i < elements; ++i) {
          ASSERT_EQ(result[static_cast<std::size_t>(i)], value_of(root_rank, root % locals, i)) << "element " << i;
        }
      }
    }
    std::vector<Tensor> one = {Tensor::empty(Shape{4}, DType::f32, *devices[0])};
    EXPECT_THROW(communicator->broadcast(one, static_cast<std::size_t>(world.size)), InvalidArgument);
  }
}

TEST(MpiCommunicator, HostSumAndBarrierAgreeOnEveryRank) {
  const MpiWorld& world = mpi_world();
  double values[2] = {1.0, static_cast<double>(world.rank)};
  mpi_sum(values, 2);
  EXPECT_EQ(values[0], world.size);
  EXPECT_EQ(values[1], world.size * (world.size - 1) / 2);
  mpi_barrier();
}

TEST(MpiCommunicator, ShardingCollectivesTakeOneTensorPerWorker) {
  auto first = make_device(Backend::sim, 64 * kMiB, {}, 0);
  auto second = make_device(Backend::sim, 64 * kMiB, {}, 1);
  const auto communicator = make_mpi_communicator();
  std::vector<Tensor> tensors = {Tensor::empty(Shape{4}, DType::f32, *first),
                                 Tensor::empty(Shape{4}, DType::f32, *second)};
  std::vector<Tensor> scratch = {Tensor::empty(Shape{2}, DType::f32, *first),
                                 Tensor::empty(Shape{2}, DType::f32, *second)};
  try {
    communicator->reduce_scatter(tensors, scratch);
    FAIL() << "two local tensors were accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("one tensor per worker"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tp::distribute
