// SPDX-License-Identifier: Apache-2.0
// Copies between two sim devices take the peer path (one transfer on the destination's stream) and stay in
// stream order on both sides: the copy waits for the source's earlier work, the destination's later work sees
// the bytes, and the source's later work cannot overwrite the bytes before the copy has read them. Copies
// with the cpu stay staged (its inline streams would block the host on the peer), unless the caller promises
// to write nothing into the source before it synchronizes (SourceRelease::caller_synchronizes, Session::run's
// feeds): then a sim device reads the host buffer in place, without staging and without blocking the host.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "device/host_addressable_device.hpp"
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

TEST(PeerCopy, ACallerSynchronizedCopyFromTheHostIsOneTransferThatNeitherStagesNorBlocks) {
  auto sim = make_device(Backend::sim, 64 * kMiB, {}, 0);
  auto cpu = make_device(Backend::cpu);
  const StagingPool& staging = dynamic_cast<HostAddressableDevice&>(*cpu).staging();
  constexpr std::size_t kBytes = 1 << 20;
  std::shared_ptr<Buffer> host = cpu->allocate(kBytes);
  std::memset(host->data(), 'H', kBytes);
  const auto target = sim->allocate(kBytes);
  // The destination's stream is busy until the gate opens: a copy that waited for its read would block here.
  Gate target_free;
  sim->stream().enqueue([&target_free] { target_free.wait(); });
  std::atomic<bool> opened{false};
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    opened = true;
    target_free.open();
  });
  const std::uint64_t staged_before = staging.stats().num_allocs;
  copy(cpu->stream(), host, 0, sim->stream(), target, 0, kBytes, SourceRelease::caller_synchronizes);
  EXPECT_FALSE(opened) << "the copy blocked the host until the destination had read the source";
  EXPECT_EQ(staging.stats().num_allocs, staged_before) << "the bytes went through the host's staging memory";
  const std::weak_ptr<Buffer> source = host;
  host.reset();  // the caller's last reference: the copy's task holds the source until it has read it
  EXPECT_FALSE(source.expired());
  opener.join();
  EXPECT_EQ(read(*sim, target), std::vector<char>(kBytes, 'H'));
  EXPECT_TRUE(source.expired());

  // Without the promise the host's bytes are staged, so the caller may reuse its buffer at once.
  const auto reused = cpu->allocate(kBytes);
  std::memset(reused->data(), 'R', kBytes);
  copy(cpu->stream(), reused, 0, sim->stream(), target, 0, kBytes);
  EXPECT_GT(staging.stats().num_allocs, staged_before);
  std::memset(reused->data(), 'X', kBytes);
  EXPECT_EQ(read(*sim, target), std::vector<char>(kBytes, 'R'));
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

// One ring step: sim:0 -> sim:1 and sim:1 -> sim:0 at once. The first copy runs on sim:1's stream 1, held
// busy by a gate; the second, on sim:0's stream, must not wait for it (copy() one after the other would: the
// first copy's back-wait puts it before everything later on sim:0). Both end with the right bytes, and each
// source's later work still waits for the copy that reads it.
TEST(PeerCopy, ConcurrentCopiesDoNotWaitForEachOther) {
  auto first = make_device(Backend::sim, 64 * kMiB, {}, 0);
  auto second = make_device(Backend::sim, 64 * kMiB, {.num_streams = 2}, 1);
  constexpr std::size_t kBytes = 1 << 16;
  const auto a = first->allocate(kBytes), a_in = first->allocate(kBytes);
  const auto b = second->allocate(kBytes), b_in = second->allocate(kBytes);
  std::vector<char> ones(kBytes, 1), twos(kBytes, 2);
  first->copy_from_host(first->stream(), ones.data(), a, 0, kBytes);
  second->copy_from_host(second->stream(), twos.data(), b, 0, kBytes);
  Gate busy;
  second->stream(1).enqueue([&busy] { busy.wait(); });
  const std::vector<CopyRequest> copies{{&first->stream(), a, 0, &second->stream(1), b_in, 0, kBytes},
                                        {&second->stream(), b, 0, &first->stream(), a_in, 0, kBytes}};
  const Event second_copy = copy_concurrently(copies).at(1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!second_copy.query() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool independent = second_copy.query();
  busy.open();
  EXPECT_TRUE(independent) << "the sim:1 -> sim:0 copy waited for the gated sim:0 -> sim:1 copy";
  first->stream().enqueue([a] { std::memset(a->data(), 9, kBytes); });  // after the copy that reads `a`
  EXPECT_EQ(read(*first, a_in), twos);
  second->stream(1).synchronize();
  std::vector<char> received(kBytes);
  second->copy_to_host(second->stream(1), b_in, 0, received.data(), kBytes);
  EXPECT_EQ(received, ones);
}

// device::copy between every pair of present backends (two devices of one kind included: sim's peer path,
// two opencl devices of one context through host staging): the copy waits for the source's earlier work, the
// destination's later work sees the bytes, and the source's later work does not overwrite them before the
// copy has read them. Queued streams are held behind gates that another thread opens, so the copy is
// enqueued while both sides are still busy (a cpu side runs its work inline: copy() may block on it).
class CrossBackendCopy : public ::testing::TestWithParam<std::tuple<Backend, Backend>> {};

TEST_P(CrossBackendCopy, StaysInStreamOrderOnBothSides) {
  const auto [from, to] = GetParam();
  auto first = make_device(from, 64 * kMiB, {}, 0);
  auto second = make_device(to, 64 * kMiB, {}, from == to ? 1 : 0);
  constexpr std::size_t kBytes = 1 << 20;
  const std::vector<char> as(kBytes, 'A'), bs(kBytes, 'B');
  const auto source = first->allocate(kBytes);
  const auto target = second->allocate(kBytes);
  for (int round = 0; round < 3; ++round) {
    Gate source_ready, target_free;
    if (from != Backend::cpu) first->stream().enqueue([&source_ready] { source_ready.wait(); });
    first->copy_from_host(first->stream(), as.data(), source, 0, kBytes);  // the source's earlier work
    if (to != Backend::cpu) second->stream().enqueue([&target_free] { target_free.wait(); });
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      source_ready.open();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      target_free.open();
    });
    copy(first->stream(), source, 0, second->stream(), target, 0, kBytes);
    first->copy_from_host(first->stream(), bs.data(), source, 0, kBytes);  // the source's later work
    const std::vector<char> copied = read(*second, target);
    opener.join();
    ASSERT_EQ(copied, as) << "round " << round;
    ASSERT_EQ(read(*first, source), bs) << "round " << round;
  }
}

std::vector<std::tuple<Backend, Backend>> backend_pairs() {
  std::vector<std::tuple<Backend, Backend>> pairs;
  for (const Backend from : testing::present_backends()) {
    for (const Backend to : testing::present_backends()) pairs.emplace_back(from, to);
  }
  return pairs;
}

INSTANTIATE_TEST_SUITE_P(Backends, CrossBackendCopy, ::testing::ValuesIn(backend_pairs()),
                         [](const ::testing::TestParamInfo<std::tuple<Backend, Backend>>& pair) {
                           return std::string(testing::backend_label(std::get<0>(pair.param))) + "_to_" +
                                  testing::backend_label(std::get<1>(pair.param));
                         });

}  // namespace
}  // namespace tp::device
