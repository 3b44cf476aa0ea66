// SPDX-License-Identifier: Apache-2.0
// tp::train::Strategy (train/strategy.hpp) as _tensorpool.Strategy: the description Sequential::compile turns
// into a distribution strategy, with its fields and its named constructors; and the MPI job this process may be a
// rank of (distribute/mpi.hpp). python/tensorpool/distribute/ builds tf.distribute's classes over them.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "python/bindings.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/train/distribution_strategy.hpp"
#include "tensorpool/train/strategy.hpp"

namespace tp::python {
namespace {

using train::Strategy;

std::string describe(const Strategy& strategy) {
  std::string devices;
  for (const std::string& device : strategy.devices) devices += (devices.empty() ? "'" : ", '") + device + "'";
  std::string text = "Strategy(kind=";
  switch (strategy.kind) {
    case Strategy::Kind::one: text += "one"; break;
    case Strategy::Kind::mirrored: text += "mirrored"; break;
    case Strategy::Kind::multi_worker: text += "multi_worker"; break;
    case Strategy::Kind::parameter_server: text += "parameter_server"; break;
  }
  text += ", devices=[" + devices + "], all_reduce=" + std::string(train::name_of(strategy.all_reduce)) +
          ", shard=" + std::string(train::name_of(strategy.shard));
  if (strategy.kind == Strategy::Kind::parameter_server) {
    text += ", parameter_device='" + strategy.parameter_device + "', max_staleness=" +
            (strategy.max_staleness ? std::to_string(*strategy.max_staleness) : std::string("None"));
  }
  return text + ", bucket_bytes=" + std::to_string(strategy.bucket_bytes) + ")";
}

}  // namespace

void bind_strategy(nb::module_& module) {
  nb::enum_<train::AllReduce>(module, "AllReduce")
      .value("ring", train::AllReduce::ring)
      .value("reduce_to_one", train::AllReduce::reduce_to_one)
      .value("mpi", train::AllReduce::mpi)
      .value("none", train::AllReduce::none)
      .value("nccl", train::AllReduce::nccl)
      .value("auto", train::AllReduce::automatic);
  nb::enum_<train::Shard>(module, "Shard")
      .value("none", train::Shard::none)
      .value("optimizer", train::Shard::optimizer)
      .value("gradients", train::Shard::gradients)
      .value("auto", train::Shard::automatic);
  module.def("parse_all_reduce", &train::parse_all_reduce, nb::arg("text"));
  module.def("parse_shard", &train::parse_shard, nb::arg("text"));

  nb::class_<Strategy> strategy(module, "Strategy",
                                "tp::train::Strategy: where a model's replicas run and how their gradients meet");
  nb::enum_<Strategy::Kind>(strategy, "Kind")
      .value("one", Strategy::Kind::one)
      .value("mirrored", Strategy::Kind::mirrored)
      .value("multi_worker", Strategy::Kind::multi_worker)
      .value("parameter_server", Strategy::Kind::parameter_server);
  strategy.def(nb::init<>())
      .def_rw("kind", &Strategy::kind)
      .def_rw("devices", &Strategy::devices)
      .def_rw("all_reduce", &Strategy::all_reduce)
      .def_rw("shard", &Strategy::shard)
      .def_rw("parameter_device", &Strategy::parameter_device)
      .def_rw("max_staleness", &Strategy::max_staleness)
      .def_rw("bucket_bytes", &Strategy::bucket_bytes)
      .def_rw("fuse_update", &Strategy::fuse_update)
      .def_rw("multi_tensor_update", &Strategy::multi_tensor_update)
      .def_ro_static("DEFAULT_BUCKET_BYTES", &Strategy::kDefaultBucketBytes)
      .def_static("one_device", &Strategy::one_device, nb::arg("device") = std::string())
      .def_static(
          "mirrored",
          [](std::vector<std::string> devices, const std::string& all_reduce, train::Shard shard) {
            return Strategy::mirrored(std::move(devices), all_reduce, shard);
          },
          nb::arg("devices") = std::vector<std::string>{}, nb::arg("all_reduce") = "ring",
          nb::arg("shard") = train::Shard::none)
      .def_static("multi_worker", &Strategy::multi_worker, nb::arg("devices") = std::vector<std::string>{},
                  nb::arg("shard") = train::Shard::none, nb::arg("all_reduce") = train::AllReduce::automatic)
      .def_static("parameter_server", &Strategy::parameter_server, nb::arg("workers"),
                  nb::arg("parameter_device") = "cpu:0", nb::arg("max_staleness") = nb::none())
      // The implementation's name ("one", "mirrored", "multi_worker", "parameter_server"); checks nothing.
      .def_prop_ro("name",
                   [](const Strategy& self) { return std::string(train::make_distribution_strategy(self)->name()); })
      .def("__repr__", &describe);

  // The MPI job: whether the library has MPI, the launcher's world size (without initialising MPI), and the
  // world itself (initialises MPI on first call; a world of one without mpirun).
  module.def("mpi_built", &distribute::mpi_built);
  module.def("launcher_world_size", &distribute::launcher_world_size);
  module.def("mpi_world", [] {
    const distribute::MpiWorld& world = distribute::mpi_world();
    return std::pair<int, int>(world.rank, world.size);
  });
}

}  // namespace tp::python
