// SPDX-License-Identifier: Apache-2.0
// In-process all-reduce: ring and reduction-to-one over 1..4 sim devices (the ring's direct path: all peers)
// and over a ring mixing sim devices with the cpu (the ring itself), sizes smaller than, equal to and larger
// than the participant count; every replica ends with the exact sum, bitwise identical everywhere.
// Reduce-scatter leaves each participant the sum of its chunk; all-gather spreads every chunk. The direct path
// sums in participant order, waits for every participant's earlier work and holds back its later work.
// Broadcast copies the root's tensor to every participant and refuses a root outside them. The collectives of
// parts (a bucket's tensors, not packed) equal those of the packed tensors bit for bit.
#include "tensorpool/distribute/communicator.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/ops/elementwise.hpp"

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

// The participants' devices: four sim devices (peers: the ring takes its direct path); sim:0, cpu:0, sim:1,
// sim:2 (a ring of peer and staged neighbours: the ring itself); and where an OpenCL device exists, four
// opencl devices (no peers: every neighbour staged through the host) and opencl:0, sim:0, cpu:0, opencl:1
// (every backend in one ring).
enum class Layout { sim, sim_and_cpu, opencl, opencl_sim_and_cpu };

std::vector<Layout> layouts() {
  std::vector<Layout> present{Layout::sim, Layout::sim_and_cpu};
  for (const Backend backend : device::testing::present_backends()) {
    if (backend == Backend::opencl) {
      present.push_back(Layout::opencl);
      present.push_back(Layout::opencl_sim_and_cpu);
    }
  }
  return present;
}

const char* name_of(Layout layout) {
  switch (layout) {
    case Layout::sim: return " sim only";
    case Layout::sim_and_cpu: return " with cpu";
    case Layout::opencl: return " opencl only";
    case Layout::opencl_sim_and_cpu: return " opencl, sim and cpu";
  }
  return "";
}

std::vector<std::unique_ptr<device::Device>> make_devices(Layout layout) {
  std::vector<std::unique_ptr<device::Device>> devices;
  for (int index = 0; index < 4; ++index) {
    if (layout == Layout::sim) {
      devices.push_back(make_device(Backend::sim, 64 * kMiB, {}, index));
    } else if (layout == Layout::sim_and_cpu) {
      devices.push_back(index == 1 ? make_device(Backend::cpu, 64 * kMiB)
                                   : make_device(Backend::sim, 64 * kMiB, {}, index > 1 ? index - 1 : index));
    } else if (layout == Layout::opencl) {
      devices.push_back(make_device(Backend::opencl, 64 * kMiB, {}, index));
    } else {
      const Backend backends[] = {Backend::opencl, Backend::sim, Backend::cpu, Backend::opencl};
      devices.push_back(make_device(backends[index], 64 * kMiB, {}, index == 3 ? 1 : 0));
    }
  }
  return devices;
}

// Runs `check(communicator, participants, count, elements)` for both in-process algorithms, 1..4 participants
// on every layout of devices, sizes smaller than, equal to and larger than the participant count, odd and even.
template <typename Check>
void for_each_case(Check check) {
  for (const Layout layout : layouts()) {
    const auto devices = make_devices(layout);
    for (const char* algorithm : {"ring", "reduce_to_one"}) {
      const auto communicator = make_communicator(algorithm);
      for (std::size_t count = 1; count <= 4; ++count) {
        for (std::int64_t elements : {1, 3, 4, 7, 1000, 4099}) {
          SCOPED_TRACE(::testing::Message()
                       << algorithm << name_of(layout) << " participants " << count << " elements " << elements);
          const auto seed = static_cast<std::uint32_t>(count * 1000 + static_cast<std::size_t>(elements));
          check(*communicator, random_participants(devices, *communicator, count, elements, seed), count, elements);
        }
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
// integers (exact in both formats) the sums are exact, and every replica ends bitwise equal. Over 2..4
// participants, on every layout of devices (direct between sim devices, the ring otherwise); reduce-scatter
// and all-gather too.
TEST(Communicator, AllReducesFloat16AndBfloat16) {
  for (const Layout layout : layouts()) {
    const auto devices = make_devices(layout);
    for (const DType dtype : {DType::f16, DType::bf16}) {
      for (const char* algorithm : {"ring", "reduce_to_one"}) {
        for (std::size_t count = 2; count <= 4; ++count) {
          SCOPED_TRACE(::testing::Message()
                       << name_of(dtype) << " " << algorithm << name_of(layout) << " participants " << count);
          const auto communicator = make_communicator(algorithm);
          constexpr std::int64_t kElements = 4099;
          std::vector<Tensor> tensors, scratch;
          std::vector<float> expected(kElements, 0.0F);
          for (std::size_t rank = 0; rank < count; ++rank) {
            std::vector<float> values;
            for (std::int64_t i = 0; i < kElements; ++i)
              values.push_back(static_cast<float>((i * 7 + static_cast<std::int64_t>(rank) * 13) % 61 - 30));
            for (std::int64_t i = 0; i < kElements; ++i)
              expected[static_cast<std::size_t>(i)] += values[static_cast<std::size_t>(i)];
            tensors.push_back(ops::cast(Tensor::from_vector<float>(values, Shape{kElements}, *devices[rank]), dtype));
            scratch.push_back(
                Tensor::empty(Shape{communicator->scratch_elements(kElements, count, rank)}, dtype, *devices[rank]));
          }
          std::vector<Tensor> copies;  // for reduce-scatter then all-gather
          for (const Tensor& tensor : tensors) copies.push_back(ops::cast(ops::cast(tensor, DType::f32), dtype));
          communicator->all_reduce(tensors, scratch);
          for (const Tensor& tensor : tensors) {
            EXPECT_EQ(tensor.dtype(), dtype);
            EXPECT_EQ(ops::cast(tensor, DType::f32).to_vector<float>(), expected);
          }
          communicator->reduce_scatter(copies, scratch);
          communicator->all_gather(copies);
          for (const Tensor& tensor : copies) EXPECT_EQ(ops::cast(tensor, DType::f32).to_vector<float>(), expected);
        }
      }
    }
  }
}

// The direct path adds each chunk's values in participant order 0..R-1 (float32, each addition rounded), the
// same for every chunk and size: the result is bitwise the left-to-right sum on the host, every time.
TEST(Communicator, DirectAllReduceSumsInParticipantOrder) {
  const auto devices = make_devices(Layout::sim);
  const auto ring = make_communicator("ring");
  for (std::size_t count = 2; count <= 4; ++count) {
    for (std::int64_t elements : {5, 4099}) {
      SCOPED_TRACE(::testing::Message() << "participants " << count << " elements " << elements);
      std::vector<float> expected;
      for (int repeat = 0; repeat < 2; ++repeat) {
        Participants made = random_participants(devices, *ring, count, elements, 77);
        std::vector<float> sum = made.tensors[0].to_vector<float>();
        for (std::size_t rank = 1; rank < count; ++rank) {
          const std::vector<float> values = made.tensors[rank].to_vector<float>();
          for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += values[i];
        }
        ring->all_reduce(made.tensors, made.scratch);
        for (std::size_t rank = 0; rank < count; ++rank) EXPECT_EQ(made.tensors[rank].to_vector<float>(), sum);
        if (repeat == 1) {
          EXPECT_EQ(sum, expected);
        }
        expected = sum;
      }
    }
  }
}

// Stream order on the direct path: the collective sees work enqueued before it on every participant (held
// back here behind a gate on participant 0), and work enqueued after it on a participant (doubling its tensor
// in place) does not run before the other participants have read and written that tensor.
TEST(Communicator, DirectCollectivesKeepStreamOrder) {
  const auto devices = make_devices(Layout::sim);
  const auto ring = make_communicator("ring");
  constexpr std::size_t kCount = 4;
  constexpr std::int64_t kElements = 4099;
  for (const bool all_reduce : {true, false}) {
    SCOPED_TRACE(all_reduce ? "all_reduce" : "reduce_scatter then all_gather");
    Participants made = random_participants(devices, *ring, kCount, kElements, 5);
    const std::vector<float> first = made.tensors[0].to_vector<float>();
    device::testing::Gate gate;
    made.tensors[0].device().stream(0).enqueue([&gate] { gate.wait(); });
    ops::scale_into(made.tensors[0], 2.0, made.tensors[0]);  // participant 0's earlier work, after the gate
    if (all_reduce) {
      ring->all_reduce(made.tensors, made.scratch);
    } else {
      ring->reduce_scatter(made.tensors, made.scratch);
      ring->all_gather(made.tensors);
    }
    for (const Tensor& tensor : made.tensors) ops::scale_into(tensor, 2.0, tensor);  // the later work
    gate.open();
    std::vector<float> expected;
    for (std::size_t rank = 0; rank < kCount; ++rank) {
      const std::vector<float> values = made.tensors[rank].to_vector<float>();
      if (rank == 0) expected = values;
      EXPECT_EQ(values, expected) << "participant " << rank;
    }
    for (std::size_t i = 0; i < expected.size(); ++i) {
      ASSERT_NEAR(expected[i], 2.0 * (made.expected[i] + first[i]), 1e-4) << i;
    }
  }
}

TEST(Communicator, BroadcastGivesEveryParticipantTheRootsTensor) {
  for_each_case([](Communicator& communicator, Participants made, std::size_t count, std::int64_t) {
    const std::size_t root = count - 1;
    const std::vector<float> rooted = made.tensors[root].to_vector<float>();
    communicator.broadcast(made.tensors, root);
    for (std::size_t rank = 0; rank < count; ++rank) EXPECT_EQ(made.tensors[rank].to_vector<float>(), rooted) << rank;
    try {
      communicator.broadcast(made.tensors, count);
      ADD_FAILURE() << "root " << count << " of " << count << " participants was accepted";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(
          std::string(error.what())
              .find("root " + std::to_string(count) + " is not one of the " + std::to_string(count) + " participants"),
          std::string::npos)
          << error.what();
    }
  });
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

// Each participant's tensor cut into up to three separate tensors (a third, one element, the rest), as the
// gradients of several layers that a bucket packs.
std::vector<std::vector<Tensor>> cut_into_parts(const Participants& made, std::int64_t elements) {
  std::vector<std::int64_t> sizes = {elements / 3, elements / 3 < elements ? 1 : 0};
  sizes.push_back(elements - sizes[0] - sizes[1]);
  std::vector<std::vector<Tensor>> parts;
  for (const Tensor& tensor : made.tensors) {
    const std::vector<float> values = tensor.to_vector<float>();
    parts.emplace_back();
    std::int64_t offset = 0;
    for (const std::int64_t size : sizes) {
      if (size == 0) continue;
      const std::vector<float> piece(values.begin() + offset, values.begin() + offset + size);
      parts.back().push_back(Tensor::from_vector<float>(piece, Shape{size}, tensor.device()));
      offset += size;
    }
  }
  return parts;
}

// The buckets summed out of the parts hold bitwise what the collective leaves in the packed tensors, whether
// the communicator reads the parts in place (the direct path between sim devices) or packs them first (the
// ring through the cpu, reduction-to-one); the parts are left as they were.
TEST(Communicator, CollectivesOfPartsEqualThoseOfThePackedTensors) {
  for_each_case([](Communicator& communicator, Participants made, std::size_t count, std::int64_t elements) {
    const std::vector<std::vector<Tensor>> parts = cut_into_parts(made, elements);
    std::vector<std::vector<float>> before;
    for (const auto& participant : parts) {
      for (const Tensor& part : participant) before.push_back(part.to_vector<float>());
    }
    std::vector<Tensor> buckets, scattered;
    for (const Tensor& tensor : made.tensors) {
      buckets.push_back(Tensor::empty(Shape{elements}, DType::f32, tensor.device()));
      scattered.push_back(Tensor::empty(Shape{elements}, DType::f32, tensor.device()));
    }
    communicator.all_reduce_parts(parts, buckets, made.scratch);
    communicator.reduce_scatter_parts(parts, scattered, made.scratch);
    std::vector<std::vector<float>> after;
    for (const auto& participant : parts) {
      for (const Tensor& part : participant) after.push_back(part.to_vector<float>());
    }
    EXPECT_EQ(after, before);

    std::vector<Tensor> packed;
    for (const Tensor& tensor : made.tensors) packed.push_back(ops::scale(tensor, 1.0));  // a copy
    communicator.reduce_scatter(packed, made.scratch);
    for (std::size_t rank = 0; rank < count; ++rank) {
      const auto [begin, end] = Communicator::chunk(elements, count, rank);
      const std::vector<float> expected = packed[rank].to_vector<float>();
      const std::vector<float> actual = scattered[rank].to_vector<float>();
      EXPECT_EQ(std::vector<float>(actual.begin() + begin, actual.begin() + end),
                std::vector<float>(expected.begin() + begin, expected.begin() + end))
          << "chunk of participant " << rank;
    }
    communicator.all_reduce(made.tensors, made.scratch);
    for (std::size_t rank = 0; rank < count; ++rank) {
      EXPECT_EQ(buckets[rank].to_vector<float>(), made.tensors[rank].to_vector<float>()) << "participant " << rank;
    }
  });
}

TEST(Communicator, PartsThatDoNotFillTheirBucketsAreRejected) {
  auto first = make_device(Backend::sim, 64 * kMiB, {}, 0);
  auto second = make_device(Backend::sim, 64 * kMiB, {}, 1);
  const auto ring = make_communicator("ring");
  const std::vector<Tensor> buckets = {Tensor::empty(Shape{6}, DType::f32, *first),
                                       Tensor::empty(Shape{6}, DType::f32, *second)};
  const std::vector<Tensor> scratch = {Tensor::empty(Shape{3}, DType::f32, *first),
                                       Tensor::empty(Shape{3}, DType::f32, *second)};
  auto zeros = [](std::int64_t size, device::Device& device) {
    return Tensor::from_vector<float>(std::vector<float>(static_cast<std::size_t>(size), 0.0F), Shape{size}, device);
  };
  auto parts_on = [&](device::Device& device, std::int64_t first_size) {
    return std::vector<Tensor>{zeros(first_size, device), zeros(6 - first_size, device)};
  };
  auto expect_rejected = [&](const std::vector<std::vector<Tensor>>& parts, const std::string& fragment) {
    try {
      ring->all_reduce_parts(parts, buckets, scratch);
      ADD_FAILURE() << "accepted; expected an error mentioning '" << fragment << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  expect_rejected({parts_on(*first, 2)}, "parts of 1 participants for 2 buckets");
  expect_rejected({parts_on(*first, 2), parts_on(*second, 3)}, "part 0 of participant 1");
  expect_rejected({parts_on(*first, 2), parts_on(*first, 2)}, "on its bucket's device sim:1");
  expect_rejected({{zeros(2, *first), zeros(3, *first)}, {zeros(2, *second), zeros(3, *second)}},
                  "hold 5 elements but its bucket 6");
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
