// SPDX-License-Identifier: Apache-2.0
// Copies on cuda devices round trip: host -> device -> the same device -> another logical device of the same
// GPU (a peer: one transfer) -> host, an overlapping copy within one buffer, and a copy between cuda and a
// device of another kind (through host staging). Skipped, saying why, without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cuda {
namespace {

using testing::cuda_options;
using testing::make_manager;
using testing::pattern;

constexpr std::size_t kLimit = std::size_t{64} << 20;
// Not a multiple of any page or vector width, and large enough for the DMA engines.
constexpr std::size_t kBytes = (std::size_t{3} << 20) + 4093;

std::vector<std::uint8_t> read_back(device::Device& device, const std::shared_ptr<Buffer>& buffer, std::size_t offset,
                                    std::size_t bytes) {
  std::vector<std::uint8_t> host(bytes);
  device.copy_to_host(device.stream(), buffer, offset, host.data(), bytes);
  return host;
}

TEST(CudaCopy, RoundTripThroughTwoLogicalDevicesOfOneGpu) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options({kLimit, kLimit}));
  device::Device& first = manager->device("cuda:0");
  device::Device& second = manager->device("cuda:1");
  const std::vector<std::uint8_t> bytes = pattern(kBytes, 1);

  const std::shared_ptr<Buffer> a = first.allocate(kBytes);
  const std::shared_ptr<Buffer> b = first.allocate(kBytes);
  const std::shared_ptr<Buffer> c = second.allocate(kBytes);
  first.copy_from_host(first.stream(), bytes.data(), a, 0, kBytes);
  device::copy(first.stream(), a, 0, first.stream(), b, 0, kBytes);   // within cuda:0
  device::copy(first.stream(), b, 0, second.stream(), c, 0, kBytes);  // to the peer cuda:1
  EXPECT_EQ(read_back(second, c, 0, kBytes), bytes);
  EXPECT_EQ(read_back(first, a, 0, kBytes), bytes) << "the source is unchanged";

  // A part at odd offsets, the other way.
  constexpr std::size_t kOffset = 12345;
  constexpr std::size_t kPart = 777777;
  const std::vector<std::uint8_t> part = pattern(kPart, 2);
  second.copy_from_host(second.stream(), part.data(), c, kOffset, kPart);
  device::copy(second.stream(), c, kOffset, first.stream(), a, kOffset + 1, kPart);
  std::vector<std::uint8_t> expected = bytes;
  std::memcpy(expected.data() + kOffset + 1, part.data(), kPart);
  EXPECT_EQ(read_back(first, a, 0, kBytes), expected);
  first.synchronize();
  second.synchronize();
}

TEST(CudaCopy, AnOverlappingCopyWithinOneBufferMovesTheBytes) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  device::Device& gpu = manager->device("cuda:0");
  const std::vector<std::uint8_t> bytes = pattern(kBytes, 3);
  const std::shared_ptr<Buffer> buffer = gpu.allocate(kBytes);
  gpu.copy_from_host(gpu.stream(), bytes.data(), buffer, 0, kBytes);
  constexpr std::size_t kShift = 1000;
  const std::size_t moved = kBytes - kShift;
  device::copy(gpu.stream(), buffer, 0, gpu.stream(), buffer, kShift, moved);  // as memmove
  std::vector<std::uint8_t> expected = bytes;
  std::memmove(expected.data() + kShift, bytes.data(), moved);
  EXPECT_EQ(read_back(gpu, buffer, 0, kBytes), expected);
}

TEST(CudaCopy, ToAndFromADeviceOfAnotherKind) {
  TP_REQUIRE_CUDA();
  auto options = cuda_options();
  options.sim_devices = 1;
  const auto manager = make_manager(options);
  device::Device& gpu = manager->device("cuda:0");
  device::Device& sim = manager->device("sim:0");
  EXPECT_FALSE(device::peer_accessible(gpu, sim));
  EXPECT_FALSE(device::peer_accessible(sim, gpu));
  const std::vector<std::uint8_t> bytes = pattern(kBytes, 4);
  const std::shared_ptr<Buffer> on_sim = sim.allocate(kBytes);
  const std::shared_ptr<Buffer> on_gpu = gpu.allocate(kBytes);
  const std::shared_ptr<Buffer> back = sim.allocate(kBytes);
  sim.copy_from_host(sim.stream(), bytes.data(), on_sim, 0, kBytes);
  device::copy(sim.stream(), on_sim, 0, gpu.stream(), on_gpu, 0, kBytes);
  device::copy(gpu.stream(), on_gpu, 0, sim.stream(), back, 0, kBytes);
  EXPECT_EQ(read_back(sim, back, 0, kBytes), bytes);
  EXPECT_EQ(read_back(gpu, on_gpu, 0, kBytes), bytes);
}

TEST(CudaCopy, ReadToHostAsyncHoldsTheBytesOnceItsEventCompletes) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  device::Device& gpu = manager->device("cuda:0");
  const std::vector<std::uint8_t> bytes = pattern(kBytes, 5);
  const std::shared_ptr<Buffer> buffer = gpu.allocate(kBytes);
  gpu.copy_from_host(gpu.stream(), bytes.data(), buffer, 0, kBytes);
  const device::HostReadback readback = gpu.read_to_host_async(gpu.stream(), buffer, 0, kBytes);
  readback.ready.synchronize();
  EXPECT_EQ(std::memcmp(readback.bytes.get(), bytes.data(), kBytes), 0);
  gpu.synchronize();
}

}  // namespace
}  // namespace tp::backend::cuda
