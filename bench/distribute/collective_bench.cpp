// SPDX-License-Identifier: Apache-2.0
// tp_collective_bench: all-reduce bus bandwidth (busbw = bytes / time x 2(N-1)/N, NCCL's convention) of the
// in-process ring over 2 and 4 sim devices against the host's memcpy bandwidth, and, when run under
// `mpirun -np N`, of the MPI communicator (one sim device per rank) against MPI_Allreduce called directly on
// host memory (or, with --collective reduce_scatter, its reduce-scatter against MPI_Reduce_scatter_block).
// Sizes 1 KiB..256 MiB; each figure is the median of --rounds timed rounds, ours and the peer
// alternating within a round.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tensorpool/core/units.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/distribute/communicator.hpp"
#include "tensorpool/distribute/mpi.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Repeats `body` until `budget` seconds pass (at least once); seconds per call.
template <typename Body>
double time_per_call(double budget, Body body) {
  int calls = 0;
  const auto start = Clock::now();
  do {
    body();
    ++calls;
  } while (seconds_since(start) < budget);
  return seconds_since(start) / calls;
}

// NCCL's bus bandwidth: an all-reduce moves 2(N-1)/N of the bytes per participant, a reduce-scatter (N-1)/N.
double bus_bandwidth(std::size_t bytes, double seconds, std::size_t participants, double factor = 2.0) {
  return static_cast<double>(bytes) / seconds * factor * static_cast<double>(participants - 1) /
         static_cast<double>(participants) / 1e9;
}

std::vector<std::size_t> sizes(std::size_t largest) {
  std::vector<std::size_t> result;
  for (std::size_t bytes = 1024; bytes <= largest; bytes *= 4) result.push_back(bytes);
  return result;
}

void in_process(int rounds, double budget, std::size_t largest) {
  std::printf("| devices | bytes | ring busbw GB/s | memcpy GB/s | busbw / memcpy |\n|---:|---:|---:|---:|---:|\n");
  for (int count : {2, 4}) {
    tp::device::DeviceManagerOptions options;
    options.sim_devices = count;
    options.sim_memory_bytes = 4 * largest + 64 * tp::kMiB;
    tp::device::DeviceManager manager(options, [](const char*) -> const char* { return nullptr; });
    const auto ring = tp::distribute::make_communicator("ring");
    for (std::size_t bytes : sizes(largest)) {
      const auto elements = static_cast<std::int64_t>(bytes / sizeof(float));
      std::vector<tp::Tensor> tensors, scratch;
      for (int index = 0; index < count; ++index) {
        tp::device::Device& device = manager.device("sim:" + std::to_string(index));
        tensors.push_back(tp::Tensor::empty(tp::Shape{elements}, tp::DType::f32, device));
        scratch.push_back(tp::Tensor::empty(
            tp::Shape{std::max<std::int64_t>(1, ring->scratch_elements(elements, static_cast<std::size_t>(count), 0))},
            tp::DType::f32, device));
      }
      std::vector<char> source(bytes, 1), target(bytes);
      std::vector<double> ours, peer;
      for (int round = 0; round < rounds; ++round) {
        ours.push_back(time_per_call(budget, [&] {
          ring->all_reduce(tensors, scratch);
          for (int index = 0; index < count; ++index) manager.device("sim:" + std::to_string(index)).synchronize();
        }));
        peer.push_back(time_per_call(budget, [&] { std::memcpy(target.data(), source.data(), bytes); }));
      }
      const double busbw = bus_bandwidth(bytes, median(ours), static_cast<std::size_t>(count));
      const double memcpy_rate = static_cast<double>(bytes) / median(peer) / 1e9;
      std::printf("| %d | %s | %.2f | %.2f | %.2f |\n", count, tp::format_bytes(bytes).c_str(), busbw, memcpy_rate,
                  busbw / memcpy_rate);
    }
  }
}

// `scatter`: reduce-scatter (ours against MPI_Reduce_scatter_block) instead of all-reduce.
void across_ranks(int rounds, double budget, std::size_t largest, bool scatter) {
  const tp::distribute::MpiWorld& world = tp::distribute::mpi_world();
  if (world.rank == 0) {
    std::printf("| ranks | bytes | ours busbw GB/s | %s busbw GB/s | ours / MPI |\n|---:|---:|---:|---:|---:|\n",
                scatter ? "MPI_Reduce_scatter_block" : "MPI_Allreduce");
  }
  tp::device::DeviceManagerOptions options;
  options.sim_devices = 1;
  options.sim_memory_bytes = 2 * largest + 64 * tp::kMiB;
  tp::device::DeviceManager manager(options, [](const char*) -> const char* { return nullptr; });
  tp::device::Device& device = manager.device("sim:0");
  const auto mpi = tp::distribute::make_mpi_communicator();
  // Warm up both paths (MPI's shared-memory transport sets itself up at the first call).
  {
    std::vector<tp::Tensor> tensors = {tp::Tensor::empty(tp::Shape{1024}, tp::DType::f32, device)};
    std::vector<tp::Tensor> scratch = {tp::Tensor::empty(tp::Shape{1}, tp::DType::f32, device)};
    mpi->all_reduce(tensors, scratch);
    device.synchronize();
  }
  for (std::size_t bytes : sizes(largest)) {
    const auto elements = static_cast<std::int64_t>(bytes / sizeof(float));
    std::vector<tp::Tensor> tensors = {tp::Tensor::empty(tp::Shape{elements}, tp::DType::f32, device)};
    std::vector<tp::Tensor> scratch = {tp::Tensor::empty(tp::Shape{1}, tp::DType::f32, device)};
    std::vector<float> host(static_cast<std::size_t>(elements), 1.0F);
    const int block = static_cast<int>(elements / world.size);  // the peer's equal blocks (the sizes divide)
    std::vector<float> received(static_cast<std::size_t>(std::max(block, 1)));
    std::vector<double> ours, peer;
    for (int round = 0; round < rounds; ++round) {
      // Every rank makes the same number of calls: about `budget` seconds' worth at 1 GB/s, at least 3.
      for (int side = 0; side < 2; ++side) {
        const int calls = static_cast<int>(std::clamp<double>(budget * 1e9 / static_cast<double>(bytes), 3.0, 1000.0));
        MPI_Barrier(MPI_COMM_WORLD);
        const auto start = Clock::now();
        for (int call = 0; call < calls; ++call) {
          if (side == 0) {
            if (scatter) {
              mpi->reduce_scatter(tensors, scratch);
            } else {
              mpi->all_reduce(tensors, scratch);
            }
            device.synchronize();
          } else if (scatter) {
            MPI_Reduce_scatter_block(host.data(), received.data(), block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          } else {
            MPI_Allreduce(MPI_IN_PLACE, host.data(), static_cast<int>(elements), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          }
        }
        (side == 0 ? ours : peer).push_back(seconds_since(start) / calls);
      }
    }
    if (world.rank == 0) {
      const auto ranks = static_cast<std::size_t>(world.size);
      const double factor = scatter ? 1.0 : 2.0;
      const double ours_busbw = bus_bandwidth(bytes, median(ours), ranks, factor);
      const double peer_busbw = bus_bandwidth(bytes, median(peer), ranks, factor);
      std::printf("| %d | %s | %.2f | %.2f | %.2f |\n", world.size, tp::format_bytes(bytes).c_str(), ours_busbw,
                  peer_busbw, ours_busbw / peer_busbw);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tp_collective_bench: all-reduce bus bandwidth, in process and across MPI ranks"};
  int rounds = 5;
  double seconds = 0.2;
  std::size_t largest = 256 * tp::kMiB;
  std::string mode = "auto";
  app.add_option("--rounds", rounds, "alternating rounds (medians are reported)")->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "time budget of one measurement")->check(CLI::PositiveNumber);
  app.add_option("--largest", largest, "largest size in bytes (sizes go 1 KiB, 4 KiB, ... up to it)");
  app.add_option("--mode", mode, "in_process | mpi | auto (mpi under mpirun with >1 rank, else in_process)");
  std::string collective = "all_reduce";
  app.add_option("--collective", collective, "mpi mode: all_reduce | reduce_scatter")
      ->check(CLI::IsMember({"all_reduce", "reduce_scatter"}));
  CLI11_PARSE(app, argc, argv);
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  if (mode == "mpi" || (mode == "auto" && under_mpirun)) {
    across_ranks(rounds, seconds, largest, collective == "reduce_scatter");
  } else {
    in_process(rounds, seconds, largest);
  }
  return 0;
}
