// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/runtime/pending_run.hpp"

#include <utility>

#include "tensorpool/core/error.hpp"

namespace tp::runtime {

PendingRun::PendingRun(PendingRun&& other) noexcept
    : id_(other.id_),
      ledger_(std::move(other.ledger_)),
      host_(other.host_),
      fetches_(std::move(other.fetches_)),
      streams_(std::move(other.streams_)),
      drained_(std::move(other.drained_)),
      feeds_(std::move(other.feeds_)),
      waited_(std::exchange(other.waited_, true)) {}

PendingRun& PendingRun::operator=(PendingRun&& other) noexcept {
  if (this == &other) return *this;
  if (!waited_) wait_for_work();
  id_ = other.id_;
  ledger_ = std::move(other.ledger_);
  host_ = other.host_;
  fetches_ = std::move(other.fetches_);
  streams_ = std::move(other.streams_);
  drained_ = std::move(other.drained_);
  feeds_ = std::move(other.feeds_);
  waited_ = std::exchange(other.waited_, true);
  return *this;
}

PendingRun::~PendingRun() {
  if (!waited_) wait_for_work();
}

bool PendingRun::done() const {
  for (const device::Event& event : drained_) {
    if (!event.query()) return false;
  }
  return true;
}

void PendingRun::wait_for_work() const noexcept {
  // With a later run launched, its work is queued behind this run's on every stream this run used, so the
  // devices stay busy while the host wakes up: the host sleeps at once instead of polling, which on a machine
  // with no spare core would take time from the streams' threads. With none, the devices go idle once this
  // run is done and the host's wake-up is on the way to the next launch: it polls first.
  bool later_run_in_flight = false;
  {
    std::lock_guard lock(ledger_->mutex);
    later_run_in_flight = ledger_->launched > id_;
  }
  for (std::size_t index = 0; index < drained_.size(); ++index) {
    streams_[index]->device().wait_on_host(drained_[index], later_run_in_flight);
  }
}

void PendingRun::check_failures() {
  std::lock_guard lock(ledger_->mutex);
  if (id_ <= ledger_->failed_through) std::rethrow_exception(ledger_->failure);
  bool failed = false;
  for (const device::Stream* stream : streams_) failed = failed || stream->failed();
  if (!failed) return;
  // Reports the kept errors (the first one found is thrown) and clears them; synchronize() also waits for
  // the work of later runs in flight on those devices, which the errors made the streams skip.
  std::exception_ptr error;
  for (device::Stream* stream : streams_) {
    if (!stream->failed()) continue;
    try {
      stream->device().synchronize();
    } catch (...) {
      if (error == nullptr) error = std::current_exception();
    }
  }
  if (error == nullptr) {
    error =
        std::make_exception_ptr(DeviceError("[session] a run's stream failed, and its error was reported elsewhere"));
  }
  ledger_->failed_through = ledger_->launched;
  ledger_->failure = error;
  std::rethrow_exception(error);
}

std::vector<Tensor> PendingRun::wait() {
  if (waited_) TP_THROW(InvalidArgument, "session", "PendingRun::wait(): this run was already waited for (or moved)");
  waited_ = true;
  wait_for_work();
  feeds_.clear();
  check_failures();
  std::vector<Tensor> results;
  results.reserve(fetches_.size());
  for (Fetch& fetch : fetches_) {
    if (fetch.on_host.defined()) {
      results.push_back(std::move(fetch.on_host));
      continue;
    }
    const TensorTag tag{.name = fetch.name, .kind = memory::AllocationKind::activation};
    results.push_back(fetch.readback.bytes == nullptr  // no elements
                          ? Tensor::empty(fetch.shape, fetch.dtype, *host_, tag)
                          : Tensor::from_host(fetch.readback.bytes.get(), fetch.shape, fetch.dtype, *host_, tag));
  }
  fetches_.clear();
  return results;
}

}  // namespace tp::runtime
