// Copies between two sim devices take the peer path (one transfer on the destination's stream) and stay in
// stream order on both sides: the copy waits for the source's earlier work, the destination's later work sees
// the bytes, and the source's later work cannot overwrite the bytes before the copy has read them. Copies
// with the cpu stay staged (its inline streams would block the host on the peer).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/buffer.hpp"

namespace tp::device {
namespace {

using testing::Backend;
using testing::Gate;
using testing::make_device;

std::vector<char> read(Device& device, const std::shared_ptr<Buffer>& buffer) {
  std::vector<char> bytes(buffer->bytes());
  device.copy_to_host(device.stream(), buffer, 0, bytes.data(), bytes.size());
  return bytes;
}

TEST(PeerCopy, SimDevicesHavePeerAccessAndTheCpuDoesNot) {
  auto first = make_device(Backend::sim, 64 * kMiB, {}, 0);
  auto second = make_device(Backend::sim, 64 * kMiB, {}, 1);
  auto cpu = make_device(Backend::cpu);
  std::vector<char> ones(4096, 1);
  const auto source = first->allocate(ones.size());
  const auto target = second->allocate(ones.size());
  const auto host = cpu->allocate(ones.size());
  first->copy_from_host(first->stream(), ones.data(), source, 0, ones.size());
  copy(first->stream(), source, 0, second->stream(), target, 0, ones.size());
  EXPECT_EQ(read(*second, target), ones);
  copy(second->stream(), target, 0, cpu->stream(), host, 0, ones.size());
  EXPECT_EQ(read(*cpu, host), ones);
}

TEST(PeerCopy, StaysInStreamOrderOnBothSides) {
  auto first = make_device(Backend::sim, 64 * kMiB, {}, 0);
  auto second = make_device(Backend::sim, 64 * kMiB, {}, 1);
  constexpr std::size_t kBytes = 1 << 20;
  const auto source = first->allocate(kBytes);
  const auto target = second->allocate(kBytes);
  for (int round = 0; round < 20; ++round) {
    Gate source_ready, target_free;
    // The source's earlier work writes 'A' once released; the copy must wait for it.
    first->stream().enqueue([&source_ready, source] {
      source_ready.wait();
      std::memset(source->data(), 'A', kBytes);
    });
    // The destination is busy with earlier work; the copy runs behind it on the destination's stream.
    second->stream().enqueue([&target_free] { target_free.wait(); });
    copy(first->stream(), source, 0, second->stream(), target, 0, kBytes);
    // The source's later work overwrites the bytes; it must not run before the copy has read them.
    first->stream().enqueue([source] { std::memset(source->data(), 'B', kBytes); });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    source_ready.open();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    target_free.open();
    const std::vector<char> copied = read(*second, target);
    ASSERT_EQ(copied, std::vector<char>(kBytes, 'A')) << "round " << round;
    first->synchronize();
    ASSERT_EQ(read(*first, source), std::vector<char>(kBytes, 'B'));
  }
}

}  // namespace
}  // namespace tp::device
