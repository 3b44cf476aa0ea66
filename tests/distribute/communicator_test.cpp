// In-process all-reduce: ring and reduction-to-one over 1..4 sim devices, sizes smaller than, equal to and
// larger than the participant count; every replica ends with the exact sum, bitwise identical everywhere.
// Reduce-scatter leaves each participant the sum of its chunk; all-gather spreads every chunk.
#include "tensorpool/distribute/communicator.hpp"

#include <gtest/gtest.h>

#include <random>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/ops/cast.hpp"

namespace tp::distribute {
namespace {

using device::testing::Backend;
using device::testing::make_device;

struct Participants {
  std::vector<Tensor> tensors, scratch;  // one each per participant, on its own sim device
  std::vector<double> expected;          // the elementwise sum over the participants
};

Participants random_participants(const std::vector<std::unique_ptr<device::Device>>& devices,
                                 const Communicator& communicator, std::size_t participants, std::int64_t elements,
                                 std::uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> distribution(-1.0F, 1.0F);
  Participants made;
  made.expected.assign(static_cast<std::size_t>(elements), 0.0);
  for (std::size_t rank = 0; rank < participants; ++rank) {
    std::vector<float> values(static_cast<std::size_t>(elements));
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] = distribution(engine);
      made.expected[i] += values[i];
    }
    made.tensors.push_back(Tensor::from_vector<float>(values, Shape{elements}, *devices[rank]));
    made.scratch.push_back(
        Tensor::empty(Shape{communicator.scratch_elements(elements, participants, rank)}, DType::f32, *devices[rank]));
  }
  return made;
}

// Runs `check(communicator, participants, count, elements)` for both in-process algorithms, 1..4 participants
// on 4 sim devices and sizes smaller than, equal to and larger than the participant count.
template <typename Check>
void for_each_case(Check check) {
  std::vector<std::unique_ptr<device::Device>> devices;
  for (int index = 0; index < 4; ++index) devices.push_back(make_device(Backend::sim, 64 * kMiB, {}, index));
  for (const char* algorithm : {"ring", "reduce_to_one"}) {
    const auto communicator = make_communicator(algorithm);
    for (std::size_t count = 1; count <= 4; ++count) {
      for (std::int64_t elements : {1, 3, 4, 7, 1000}) {
        SCOPED_TRACE(::testing::Message() << algorithm << " participants " << count << " elements " << elements);
        const auto seed = static_cast<std::uint32_t>(count * 1000 + static_cast<std::size_t>(elements));
        check(*communicator, random_participants(devices, *communicator, count, elements, seed), count, elements);
      }
    }
  }
}

TEST(Communicator, AllReduceSumsAndLeavesEveryReplicaBitwiseEqual) {
  for_each_case([](Communicator& communicator, Participants made, std::size_t count, std::int64_t) {
    communicator.all_reduce(made.tensors, made.scratch);
    const std::vector<float> first = made.tensors[0].to_vector<float>();
    for (std::size_t i = 0; i < first.size(); ++i) ASSERT_NEAR(first[i], made.expected[i], 1e-5) << "element " << i;
    for (std::size_t rank = 1; rank < count; ++rank) EXPECT_EQ(made.tensors[rank].to_vector<float>(), first);
  });
}

TEST(Communicator, ReduceScatterLeavesEachParticipantTheSumOfItsChunkAndAllGatherSpreadsTheChunks) {
  for_each_case([](Communicator& communicator, Participants made, std::size_t count, std::int64_t elements) {
    communicator.reduce_scatter(made.tensors, made.scratch);
    std::vector<float> gathered(static_cast<std::size_t>(elements));
    for (std::size_t rank = 0; rank < count; ++rank) {
      const auto [begin, end] = Communicator::chunk(elements, count, rank);
      const std::vector<float> values = made.tensors[rank].to_vector<float>();
      for (std::int64_t i = begin; i < end; ++i) {
        const auto index = static_cast<std::size_t>(i);
        ASSERT_NEAR(values[index], made.expected[index], 1e-5) << i;
        gathered[index] = values[index];
      }
    }
    communicator.all_gather(made.tensors);
    for (std::size_t rank = 0; rank < count; ++rank) EXPECT_EQ(made.tensors[rank].to_vector<float>(), gathered);
  });
}

// Mixed precision all-reduces 16-bit gradients: each addition is done in float32 and rounded once, so with
// integers (exact in both formats) the sums are exact, and every replica ends bitwise equal.
TEST(Communicator, AllReducesFloat16AndBfloat16) {
  std::vector<std::unique_ptr<device::Device>> devices;
  for (int index = 0; index < 3; ++index) devices.push_back(make_device(Backend::sim, 64 * kMiB, {}, index));
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const char* algorithm : {"ring", "reduce_to_one"}) {
      SCOPED_TRACE(::testing::Message() << name_of(dtype) << " " << algorithm);
      const auto communicator = make_communicator(algorithm);
      constexpr std::int64_t kElements = 1001;
      std::vector<Tensor> tensors, scratch;
      std::vector<float> expected(kElements, 0.0F);
      for (std::size_t rank = 0; rank < devices.size(); ++rank) {
        std::vector<float> values;
        for (std::int64_t i = 0; i < kElements; ++i)
          values.push_back(static_cast<float>((i * 7 + static_cast<std::int64_t>(rank) * 13) % 61 - 30));
        for (std::int64_t i = 0; i < kElements; ++i)
          expected[static_cast<std::size_t>(i)] += values[static_cast<std::size_t>(i)];
        tensors.push_back(ops::cast(Tensor::from_vector<float>(values, Shape{kElements}, *devices[rank]), dtype));
        scratch.push_back(Tensor::empty(Shape{communicator->scratch_elements(kElements, devices.size(), rank)}, dtype,
                                        *devices[rank]));
      }
      communicator->all_reduce(tensors, scratch);
      for (const Tensor& tensor : tensors) {
        EXPECT_EQ(tensor.dtype(), dtype);
        EXPECT_EQ(ops::cast(tensor, DType::f32).to_vector<float>(), expected);
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
