// SPDX-License-Identifier: Apache-2.0
// Parameter-server training across the ranks of an mpirun job (train/parameter_server.hpp): rank 0 serves the
// ParameterStore over distribute/parameter_transport.hpp, ranks 1..N-1 run the worker loop against it.
//
// Server loop: take the next request (pull, push, done); a push is applied at once; a pull, and every push,
// is answered with the current parameters as soon as the staleness bound lets that worker go on (until then
// the worker is "deferred"). A worker that is neither deferred nor done must send something within the peer
// timeout; otherwise the server fails naming its rank. When every worker is done the server says goodbye to
// each, and a worker returns only then: requests of a later run never reach this run's server loop.
#include <chrono>
#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/distribute/parameter_transport.hpp"
#include "train/gradient_worker.hpp"
#include "train/parameter_server_run.hpp"

namespace tp::train {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kGoodbye = -1;  // the version of the server's last message to a worker

device::Device& device_of(Sequential& model, const std::string& name) {
  const runtime::SessionOptions& options = model.session().options();
  return (options.devices != nullptr ? *options.devices : device::DeviceManager::instance()).device(name);
}

// A worker's connection to rank 0.
class RemoteParameterSource final : public ParameterSource {
 public:
  explicit RemoteParameterSource(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  std::int64_t pull(std::int32_t worker, GradientWorker& into) override {
    (void)worker;
    if (!reply_pending_) {
      distribute::send_parameter_request({.request = distribute::ParameterRequest::pull}, {}, deadline());
    }
    const std::int64_t version = receive();
    into.assign_flat(values_);
    return version;
  }

  void push(const PushedGradients& pushed) override {
    gradients_.clear();
    for (const Tensor& gradient : pushed.gradients) {
      const std::vector<float> values = gradient.to_vector<float>();
      gradients_.insert(gradients_.end(), values.begin(), values.end());
    }
    distribute::send_parameter_request({.request = distribute::ParameterRequest::push,
                                        .worker_step = pushed.worker_step,
                                        .epoch = pushed.epoch,
                                        .pulled_version = pushed.pulled_version,
                                        .examples = pushed.examples,
                                        .loss = pushed.loss,
                                        .correct = pushed.correct},
                                       gradients_, deadline());
    reply_pending_ = true;  // the server answers every push with the parameters of the next step
  }

  void finish(std::int32_t worker) override {
    (void)worker;
    if (reply_pending_) receive();  // the last push's answer: unused, but the server's send must complete
    distribute::send_parameter_request({.request = distribute::ParameterRequest::done}, {}, deadline());
    receive();  // the server's goodbye once every worker is done: a later run's requests meet a later server
  }

 private:
  // A deferred worker waits for the slowest to catch up, which itself may take up to the timeout.
  distribute::Deadline deadline() const { return Clock::now() + 2 * timeout_; }
  std::int64_t receive() {
    const std::int64_t version = distribute::receive_parameters(values_, deadline());
    reply_pending_ = false;
    return version;
  }

  const std::chrono::milliseconds timeout_;
  bool reply_pending_ = false;
  std::vector<float> values_;
  std::vector<float> gradients_;
};

ParameterServerResult work(Sequential& model, const data::Dataset& train, const ParameterServerOptions& options,
                           const ParameterServerStart& start, int rank, int ranks) {
  const std::vector<std::string>& devices = model.strategy().devices;
  const std::string& device = devices[static_cast<std::size_t>(rank - 1) % devices.size()];
  GradientWorker worker(model, device, "ps_worker_rank_" + std::to_string(rank));
  RemoteParameterSource source(distribute::effective_timeout());
  ParameterServerResult result;
  const auto begin = Clock::now();
  result.worker_steps.push_back(run_worker_loop(worker, source, worker_shard(train, rank - 1, ranks - 1), rank - 1,
                                                start.first_epoch, options.fit.epochs, options.before_step));
  result.fit.train_seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  return result;
}

ParameterServerResult serve(Sequential& model, const data::Dataset& train, const ParameterServerOptions& options,
                            const ParameterServerStart& start, int ranks) {
  const Strategy& strategy = model.strategy();
  const std::int32_t workers = ranks - 1;
  const std::vector<std::pair<std::string, Tensor>> initial = model.variables();
  ParameterStore store(initial, model.compile_options().optimizer, device_of(model, strategy.parameter_device),
                       start.version, workers, strategy.max_staleness);
  std::vector<Shape> shapes;
  for (const std::string& name : store.parameter_names()) {
    for (const auto& [variable, tensor] : initial) {
      if (variable == name) shapes.push_back(tensor.shape());
    }
  }
  device::Device& cpu = device_of(model, "cpu:0");
  const std::chrono::milliseconds timeout = distribute::effective_timeout();
  std::vector<float> flat;
  std::int64_t flat_version = -1;
  const auto flatten = [&](const std::vector<Tensor>& parameters) {
    flat.clear();
    for (const Tensor& parameter : parameters) {
      const std::vector<float> values = parameter.to_vector<float>();
      flat.insert(flat.end(), values.begin(), values.end());
    }
  };
  std::vector<bool> deferred(static_cast<std::size_t>(workers), false), done(deferred);
  std::vector<Clock::time_point> heard(static_cast<std::size_t>(workers), Clock::now());
  std::int32_t finished = 0;
  ParameterServerResult result;
  result.worker_steps.assign(static_cast<std::size_t>(workers), 0);
  const auto begin = Clock::now();
  while (finished < workers) {
    if (std::optional<distribute::ParameterMessage> message =
            distribute::receive_parameter_request(Clock::now() + std::chrono::milliseconds(20))) {
      const std::int32_t worker = message->rank - 1;
      if (worker < 0 || worker >= workers || done[static_cast<std::size_t>(worker)]) {
        TP_THROW(DataError, "train", "parameter server: unexpected request from rank ", message->rank);
      }
      const auto slot = static_cast<std::size_t>(worker);
      heard[slot] = Clock::now();
      const distribute::ParameterMessageHeader& header = message->header;
      if (header.request == distribute::ParameterRequest::done) {
        done[slot] = true;
        deferred[slot] = false;
        ++finished;
        store.finish(worker);
      } else {
        if (header.request == distribute::ParameterRequest::push) {
          PushedGradients pushed{.worker = worker,
                                 .worker_step = header.worker_step,
                                 .epoch = header.epoch,
                                 .pulled_version = header.pulled_version,
                                 .loss = header.loss,
                                 .correct = header.correct,
                                 .examples = header.examples};
          std::size_t offset = 0;
          for (const Shape& shape : shapes) {
            const auto count = static_cast<std::size_t>(shape.num_elements());
            if (offset + count > message->values.size()) break;
            pushed.gradients.push_back(
                Tensor::from_vector<float>(std::span<const float>(message->values).subspan(offset, count), shape, cpu));
            offset += count;
          }
          if (offset != message->values.size() || pushed.gradients.size() != shapes.size()) {
            TP_THROW(DataError, "train", "parameter server: rank ", message->rank, " pushed ", message->values.size(),
                     " gradient values; the model has other parameter sizes (every rank must run the same model)");
          }
          store.push(pushed);
          ++result.worker_steps[slot];
        }
        deferred[slot] = true;
      }
    }
    for (std::int32_t worker = 0; worker < workers; ++worker) {
      const auto slot = static_cast<std::size_t>(worker);
      if (!deferred[slot] || !store.may_start(worker)) continue;
      const std::int64_t current = store.version();  // only this thread changes it
      const std::int64_t version = store.pull(
          worker,
          [&](const std::vector<Tensor>& parameters) {
            if (flat_version == current) return;  // already flattened for another worker
            flatten(parameters);
            flat_version = current;
          },
          false);
      distribute::send_parameters(worker + 1, version, flat, Clock::now() + timeout);
      deferred[slot] = false;
      heard[slot] = Clock::now();
    }
    const auto now = Clock::now();
    for (std::int32_t worker = 0; worker < workers; ++worker) {
      const auto slot = static_cast<std::size_t>(worker);
      if (done[slot] || deferred[slot] || now - heard[slot] <= timeout) continue;
      distribute::abandon_parameter_job();
      TP_THROW(DeviceError, "train", "parameter server (rank 0): worker rank ", worker + 1, " sent nothing for ",
               std::chrono::duration<double>(now - heard[slot]).count(),
               " s; it stalled or died. TP_COLLECTIVE_TIMEOUT (seconds) sets how long the server waits");
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  for (std::int32_t worker = 0; worker < workers; ++worker) {
    distribute::send_parameters(worker + 1, kGoodbye, {}, Clock::now() + timeout);
  }
  finish_parameter_server(model, store, start, options, train, seconds, result);
  return result;
}

}  // namespace

ParameterServerResult fit_parameter_server_mpi(Sequential& model, const data::Dataset& train,
                                               const ParameterServerOptions& options,
                                               const ParameterServerStart& start) {
  const distribute::MpiWorld& world = distribute::mpi_world();
  if (world.size < 2) {
    TP_THROW(InvalidArgument, "train",
             "parameter server under mpirun needs >= 2 ranks (rank 0 serves, the others "
             "work); run mpirun -np 3 or more, or run without mpirun for in-process workers");
  }
  return world.rank == 0 ? serve(model, train, options, start, world.size)
                         : work(model, train, options, start, world.rank, world.size);
}

}  // namespace tp::train
