// SPDX-License-Identifier: Apache-2.0
#pragma once
// PendingRun: a Session run whose work is launched on the devices' streams but not yet waited for
// (Session::run_async). It holds what that work still reads: the fed tensors (read in place by the feed
// copies) and the host staging memory the fetches are copied into, in the streams' order, right after the
// run's kernels; wait() blocks until they are there and returns the fetches on cpu:0.
//
// Keeping one run in flight while the host prepares and launches the next (as a training loop that launches
// step k + 1 before it reads step k's loss) keeps the devices busy through the host's own work between runs:
// wake-up, fetching, the loop's bookkeeping, the next batch, the launches.
//
// Errors: a kernel error of a run in flight is reported by the first wait() that finds its stream failed:
// that run's, or a later one's when the error came after the earlier run's work had completed. Every run
// launched before that report then throws the same error from its wait() (their work was skipped behind the
// error), so no result computed behind a failure is returned.
//
// A PendingRun destroyed without wait() still waits for its work (its feeds and staging must outlive it), and
// leaves a kept error to the next synchronisation of its streams. Not thread-safe: one owner waits.

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::runtime {

class Session;

class PendingRun {
 public:
  PendingRun(PendingRun&& other) noexcept;
  PendingRun& operator=(PendingRun&& other) noexcept;
  ~PendingRun();

  // Blocks until the run's work is done; returns the fetches on cpu:0, in the order they were asked for.
  // Rethrows a kernel error (see above). Throws tp::InvalidArgument when called twice.
  std::vector<Tensor> wait();
  // True once the run's work is done (never blocks).
  [[nodiscard]] bool done() const;

 private:
  friend class Session;

  // Shared by a session and its runs in flight: which launched runs a reported error covers.
  struct Ledger {
    std::mutex mutex;                  // guards the fields below
    std::uint64_t launched = 0;        // runs launched so far (run ids count from 1)
    std::uint64_t failed_through = 0;  // runs 1..failed_through are covered by `failure`
    std::exception_ptr failure{};
  };
  struct Fetch {
    std::string name;
    Shape shape;
    DType dtype = DType::f32;
    Tensor on_host{};               // a value of a host device, copied at launch
    device::HostReadback readback;  // otherwise: its bytes on their way
  };

  PendingRun() = default;
  void wait_for_work() const noexcept;
  // Throws the error covering this run, if any, after recording it in the ledger.
  void check_failures();

  std::uint64_t id_ = 0;
  std::shared_ptr<Ledger> ledger_;
  device::Device* host_ = nullptr;  // cpu:0, where the fetches are returned
  std::vector<Fetch> fetches_;
  std::vector<device::Stream*> streams_;  // every stream the run enqueued work on
  std::vector<device::Event> drained_;    // per stream: the end of the run's work there
  std::vector<Tensor> feeds_;             // read in place by the feed copies until drained
  bool waited_ = true;                    // a moved-from or waited run has nothing left to wait for
};

}  // namespace tp::runtime
