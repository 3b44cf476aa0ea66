// In-process all-reduce: ring and reduction-to-one over 1..4 sim devices, sizes smaller than, equal to and
// larger than the participant count; every replica ends with the exact sum, bitwise identical everywhere.
// Reduce-scatter leaves each participant the sum of its chunk; all-gather spreads every chunk.
#include "tensorpool/distribute/communicator.hpp"

#include <gtest/gtest.h>

#include <random>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::distribute {
namespace {

using device::testing::Backend;
using device::testing::make_device;

TEST(Communicator, AllReduceSumsAndLeavesEveryReplicaBitwiseEqual) {
  std::vector<std::unique_ptr<device::Device>> devices;
  for (int index = 0; index < 4; ++index) devices.push_back(make_device(Backend::sim, 64 * kMiB, {}, index));
  for (const char* algorithm : {"ring", "reduce_to_one"}) {
    const auto communicator = make_communicator(algorithm);
    for (std::size_t participants = 1; participants <= 4; ++participants) {
      for (std::int64_t elements : {1, 3, 4, 7, 1000}) {
        SCOPED_TRACE(::testing::Message() << algorithm << " participants " << participants << " elements " << elements);
        std::mt19937 engine(static_cast<std::uint32_t>(participants * 1000 + elements));
        std::uniform_real_distribution<float> distribution(-1.0F, 1.0F);
        std::vector<Tensor> tensors, scratch;
        std::vector<double> expected(static_cast<std::size_t>(elements), 0.0);
        for (std::size_t rank = 0; rank < participants; ++rank) {
          std::vector<float> values(static_cast<std::size_t>(elements));
          for (std::size_t i = 0; i < values.size(); ++i) {
            values[i] = distribution(engine);
            expected[i] += values[i];
          }
          tensors.push_back(Tensor::from_vector<float>(values, Shape{elements}, *devices[rank]));
          scratch.push_back(Tensor::empty(Shape{communicator->scratch_elements(elements, participants, rank)},
                                          DType::f32, *devices[rank]));
        }
        communicator->all_reduce(tensors, scratch);
        const std::vector<float> first = tensors[0].to_vector<float>();
        for (std::size_t i = 0; i < first.size(); ++i) ASSERT_NEAR(first[i], expected[i], 1e-5) << "element " << i;
        for (std::size_t rank = 1; rank < participants; ++rank) EXPECT_EQ(tensors[rank].to_vector<float>(), first);
      }
    }
  }
}

TEST(Communicator, ReduceScatterLeavesEachParticipantTheSumOfItsChunkAndAllGatherSpreadsTheChunks) {
  std::vector<std::unique_ptr<device::Device>> devices;
  for (int index = 0; index < 4; ++index) devices.push_back(make_device(Backend::sim, 64 * kMiB, {}, index));
  for (const char* algorithm : {"ring", "reduce_to_one"}) {
    const auto communicator = make_communicator(algorithm);
    for (std::size_t participants = 1; participants <= 4; ++participants) {
      for (std::int64_t elements : {1, 3, 4, 7, 1000}) {
        SCOPED_TRACE(::testing::Message() << algorithm << " participants " << participants << " elements " << elements);
        std::mt19937 engine(static_cast<std::uint32_t>(participants * 7 + elements));
        std::uniform_real_distribution<float> distribution(-1.0F, 1.0F);
        std::vector<Tensor> tensors, scratch;
        std::vector<double> expected(static_cast<std::size_t>(elements), 0.0);
        for (std::size_t rank = 0; rank < participants; ++rank) {
          std::vector<float> values(static_cast<std::size_t>(elements));
          for (std::size_t i = 0; i < values.size(); ++i) {
            values[i] = distribution(engine);
            expected[i] += values[i];
          }
          tensors.push_back(Tensor::from_vector<float>(values, Shape{elements}, *devices[rank]));
          scratch.push_back(Tensor::empty(Shape{communicator->scratch_elements(elements, participants, rank)},
                                          DType::f32, *devices[rank]));
        }
        communicator->reduce_scatter(tensors, scratch);
        std::vector<float> gathered(static_cast<std::size_t>(elements));
        for (std::size_t rank = 0; rank < participants; ++rank) {
          const auto [begin, end] = Communicator::chunk(elements, participants, rank);
          const std::vector<float> values = tensors[rank].to_vector<float>();
          for (std::int64_t i = begin; i < end; ++i) {
            ASSERT_NEAR(values[static_cast<std::size_t>(i)], expected[static_cast<std::size_t>(i)], 1e-5) << i;
            gathered[static_cast<std::size_t>(i)] = values[static_cast<std::size_t>(i)];
          }
        }
        communicator->all_gather(tensors);
        for (std::size_t rank = 0; rank < participants; ++rank) EXPECT_EQ(tensors[rank].to_vector<float>(), gathered);
      }
    }
  }
}

TEST(Communicator, ChunksCoverTheElementsInOrder) {
  for (std::size_t participants = 1; participants <= 5; ++participants) {
    for (std::int64_t elements : {0, 1, 4, 9, 10}) {
      std::int64_t next = 0;
      for (std::size_t rank = 0; rank < participants; ++rank) {
        const auto [begin, end] = Communicator::chunk(elements, participants, rank);
        EXPECT_EQ(begin, next);
        EXPECT_LE(end - begin,
                  (elements + static_cast<std::int64_t>(participants) - 1) / static_cast<std::int64_t>(participants));
        next = end;
      }
      EXPECT_EQ(next, elements) << participants << " participants, " << elements << " elements";
    }
  }
}

TEST(Communicator, MismatchedParticipantsAndUnknownAlgorithmsAreRejected) {
  auto first = make_device(Backend::sim, 64 * kMiB, {}, 0);
  auto second = make_device(Backend::sim, 64 * kMiB, {}, 1);
  const auto ring = make_communicator("ring");
  std::vector<Tensor> tensors = {Tensor::empty(Shape{4}, DType::f32, *first),
                                 Tensor::empty(Shape{5}, DType::f32, *second)};
  std::vector<Tensor> scratch = {Tensor::empty(Shape{3}, DType::f32, *first),
                                 Tensor::empty(Shape{3}, DType::f32, *second)};
  EXPECT_THROW(ring->all_reduce(tensors, scratch), InvalidArgument);
  tensors[1] = Tensor::empty(Shape{4}, DType::f32, *second);
  scratch[1] = Tensor::empty(Shape{1}, DType::f32, *second);
  EXPECT_THROW(ring->all_reduce(tensors, scratch), InvalidArgument);  // too little scratch
  EXPECT_THROW(ring->reduce_scatter(tensors, scratch), InvalidArgument);
  tensors[1] = Tensor::empty(Shape{6}, DType::f32, *second);
  EXPECT_THROW(ring->all_gather(tensors), InvalidArgument);
  EXPECT_THROW(make_communicator("tree"), InvalidArgument);
}

}  // namespace
}  // namespace tp::distribute
