// SPDX-License-Identifier: Apache-2.0
#include "distribute/mpi/mpi_world.hpp"

#include <mpi.h>

#include <string>
#include <thread>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"

namespace tp::distribute {

namespace {

constexpr int kArrivalTag = 7001;
constexpr int kProbeTag = 7002;
constexpr int kReplyTag = 7003;

bool& broken() {
  static bool flag = false;
  return flag;
}

// Finalises MPI at exit if this process initialised it (static destruction runs after main returns).
struct MpiSession {
  MpiWorld world;
  bool initialised_here = false;
  MpiSession() {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (initialised == 0) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      initialised_here = true;
      if (provided < MPI_THREAD_SERIALIZED) {
        TP_THROW(DeviceError, "distribute", "MPI provides thread level ", provided,
                 ", below MPI_THREAD_SERIALIZED, which the device streams need");
      }
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world.size);
  }
  ~MpiSession() {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!initialised_here || finalised != 0) return;
    if (broken()) MPI_Abort(MPI_COMM_WORLD, 1);  // a rank stalled: finalising would wait for it forever
    MPI_Finalize();
  }
};

}  // namespace

const MpiWorld& mpi_world() {
  static const MpiSession session;
  return session.world;
}

namespace detail {

std::mutex& mpi_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::uint64_t next_sequence() {
  static std::uint64_t sequence = 0;
  return ++sequence;
}

void arrive(std::uint64_t sequence, std::string_view what, std::chrono::steady_clock::time_point deadline) {
  const MpiWorld& world = mpi_world();
  if (world.size == 1) return;
  const auto others = static_cast<std::size_t>(world.size - 1);
  std::vector<std::uint64_t> theirs(others, 0);
  std::vector<int> peers;
  std::vector<MPI_Request> receives(others), sends(others);
  for (int rank = 0, slot = 0; rank < world.size; ++rank) {
    if (rank == world.rank) continue;
    peers.push_back(rank);
    MPI_Irecv(&theirs[static_cast<std::size_t>(slot)], 1, MPI_UINT64_T, rank, kArrivalTag, MPI_COMM_WORLD,
              &receives[static_cast<std::size_t>(slot)]);
    MPI_Isend(&sequence, 1, MPI_UINT64_T, rank, kArrivalTag, MPI_COMM_WORLD, &sends[static_cast<std::size_t>(slot)]);
    ++slot;
  }
  std::vector<bool> arrived(others, false);
  std::size_t pending = others;
  while (pending > 0) {
    for (std::size_t slot = 0; slot < others; ++slot) {
      if (arrived[slot]) continue;
      int done = 0;
      MPI_Test(&receives[slot], &done, MPI_STATUS_IGNORE);
      if (done == 0) continue;
      arrived[slot] = true;
      --pending;
    }
    if (pending == 0) break;
    serve_probes();
    if (std::chrono::steady_clock::now() > deadline) {
      mark_broken();
      std::string missing;
      for (std::size_t slot = 0; slot < others; ++slot) {
        if (arrived[slot]) continue;
        missing += (missing.empty() ? "" : ", ") + std::to_string(peers[slot]);
        MPI_Cancel(&receives[slot]);
        MPI_Request_free(&receives[slot]);
      }
      TP_THROW(DeviceError, "distribute", "rank ", world.rank, ": collective #", sequence, " (", what,
               ") waited in vain for rank(s) ", missing,
               ", which stalled or died; TP_COLLECTIVE_TIMEOUT (seconds) sets how long ranks wait");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  MPI_Waitall(static_cast<int>(others), sends.data(), MPI_STATUSES_IGNORE);
  for (std::size_t slot = 0; slot < others; ++slot) {
    if (theirs[slot] != sequence) {
      TP_THROW(DeviceError, "distribute", "rank ", world.rank, " is at collective #", sequence, " (", what,
               ") but rank ", peers[slot], " is at #", theirs[slot],
               "; every worker must run the same program with the same flags");
    }
  }
}

void mark_broken() { broken() = true; }

void serve_probes() {
  for (;;) {
    int waiting = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kProbeTag, MPI_COMM_WORLD, &waiting, &status);
    if (waiting == 0) return;
    int probe = 0;
    MPI_Recv(&probe, 1, MPI_INT, status.MPI_SOURCE, kProbeTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(&probe, 1, MPI_INT, status.MPI_SOURCE, kReplyTag, MPI_COMM_WORLD);
  }
}

std::string unresponsive_ranks(std::chrono::milliseconds patience) {
  mark_broken();
  const MpiWorld& world = mpi_world();
  std::vector<int> peers, replies;
  std::vector<MPI_Request> receives, sends;
  static int probe = 1;  // outlives the sends, which are never waited for
  for (int rank = 0; rank < world.size; ++rank) {
    if (rank == world.rank) continue;
    peers.push_back(rank);
  }
  replies.resize(peers.size());
  receives.resize(peers.size());
  sends.resize(peers.size());
  for (std::size_t slot = 0; slot < peers.size(); ++slot) {
    MPI_Irecv(&replies[slot], 1, MPI_INT, peers[slot], kReplyTag, MPI_COMM_WORLD, &receives[slot]);
    MPI_Isend(&probe, 1, MPI_INT, peers[slot], kProbeTag, MPI_COMM_WORLD, &sends[slot]);
  }
  std::vector<bool> answered(peers.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < deadline) {
    serve_probes();
    for (std::size_t slot = 0; slot < peers.size(); ++slot) {
      int done = 0;
      if (!answered[slot]) MPI_Test(&receives[slot], &done, MPI_STATUS_IGNORE);
      if (done != 0) answered[slot] = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string missing;
  for (std::size_t slot = 0; slot < peers.size(); ++slot) {
    if (!answered[slot]) missing += (missing.empty() ? "" : ", ") + std::to_string(peers[slot]);
  }
  return missing.empty() ? std::string("none (all answer; the transfer itself is stuck)") : missing;
}

void wait_for(MPI_Request& request, std::chrono::steady_clock::time_point deadline, std::uint64_t sequence,
              std::string_view what) {
  static constexpr std::chrono::milliseconds kSpin{5};
  const auto start = std::chrono::steady_clock::now();
  int done = 0;
  for (;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done != 0) return;
    serve_probes();
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) {
      const std::string missing = unresponsive_ranks(std::chrono::seconds(2));
      TP_THROW(DeviceError, "distribute", "rank ", mpi_world().rank, ": mpi ", what, " #", sequence,
               " did not finish in time; rank(s) ", missing,
               " stopped answering (stalled or died); TP_COLLECTIVE_TIMEOUT (seconds) sets how long ranks wait");
    }
    if (now - start < kSpin) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace detail

}  // namespace tp::distribute
