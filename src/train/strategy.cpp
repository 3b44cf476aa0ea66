// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/strategy.hpp"

#include <algorithm>
#include <set>

#include "tensorpool/core/error.hpp"

namespace tp::train {

Shard parse_shard(std::string_view text) {
  if (text == "none") return Shard::none;
  if (text == "optimizer") return Shard::optimizer;
  if (text == "gradients") return Shard::gradients;
  if (text == "auto") return Shard::automatic;
  TP_THROW(InvalidArgument, "train", "shard '", text,
           "' is not none, optimizer (ZeRO-1: optimizer state split between replicas), gradients (ZeRO-2: "
           "gradients too) or auto (optimizer where the mirrored update folds the all-reduce in)");
}

std::string_view name_of(Shard shard) {
  switch (shard) {
    case Shard::none: return "none";
    case Shard::optimizer: return "optimizer";
    case Shard::gradients: return "gradients";
    case Shard::automatic: return "auto";
  }
  return "none";
}

AllReduce parse_all_reduce(std::string_view text) {
  if (text == "ring") return AllReduce::ring;
  if (text == "reduce_to_one") return AllReduce::reduce_to_one;
  if (text == "mpi") return AllReduce::mpi;
  if (text == "none") return AllReduce::none;
  if (text == "nccl") return AllReduce::nccl;
  if (text == "auto") return AllReduce::automatic;
  TP_THROW(InvalidArgument, "train", "all_reduce '", text,
           "' is not auto, ring, reduce_to_one (mirrored), mpi (multi_worker), nccl (cuda devices on distinct GPUs) or "
           "none (parameter_server)");
}

std::string_view name_of(AllReduce algorithm) {
  switch (algorithm) {
    case AllReduce::ring: return "ring";
    case AllReduce::reduce_to_one: return "reduce_to_one";
    case AllReduce::mpi: return "mpi";
    case AllReduce::none: return "none";
    case AllReduce::nccl: return "nccl";
    case AllReduce::automatic: return "auto";
  }
  return "ring";
}

namespace {

// Why NCCL cannot serve these devices ("" when it can): every one a cuda device, each on a GPU of its own.
std::string why_not_nccl(const std::vector<std::string>& devices, const std::vector<std::string>& physical) {
  std::set<std::string> gpus;
  for (std::size_t index = 0; index < devices.size(); ++index) {
    if (!physical[index].starts_with("cuda:")) return devices[index] + " is not a cuda device";
    if (!gpus.insert(physical[index]).second) {
      return "two of the devices share the GPU " + physical[index] + " (NCCL takes one participant per GPU)";
    }
  }
  return "";
}

}  // namespace

AllReduceChoice choose_all_reduce(Strategy::Kind kind, AllReduce requested, const std::vector<std::string>& devices,
                                  const std::vector<std::string>& physical_devices) {
  if (devices.size() != physical_devices.size()) {
    TP_THROW(InvalidArgument, "train", "choose_all_reduce: ", devices.size(), " devices but ", physical_devices.size(),
             " physical devices");
  }
  const bool mirrored = kind == Strategy::Kind::mirrored;
  const bool multi_worker = kind == Strategy::Kind::multi_worker;
  const std::string why_not = why_not_nccl(devices, physical_devices);
  // Only a choice that involved cuda devices is explained (a line for the log); sim and cpu runs stay quiet.
  const bool any_cuda = std::any_of(physical_devices.begin(), physical_devices.end(),
                                    [](const std::string& name) { return name.starts_with("cuda:"); });
  if (requested == AllReduce::automatic) {
    if (mirrored) {
      if (devices.size() >= 2 && why_not.empty()) {
        return {AllReduce::nccl, "all-reduce: nccl (each replica on a GPU of its own)"};
      }
      if (devices.size() < 2 || !any_cuda) return {AllReduce::ring, ""};
      return {AllReduce::ring, "all-reduce: ring, not nccl: " + why_not +
                                   "; the in-process collectives read each other's memory directly"};
    }
    if (multi_worker) {
      if (why_not.empty()) return {AllReduce::nccl, "all-reduce: nccl across the workers (cuda devices)"};
      return {AllReduce::mpi, any_cuda ? "all-reduce: mpi across the workers, not nccl: " + why_not : ""};
    }
    return {kind == Strategy::Kind::parameter_server ? AllReduce::none : AllReduce::ring, ""};
  }
  if (requested == AllReduce::nccl) {
    if (!mirrored && !multi_worker) {
      TP_THROW(InvalidArgument, "train", "all_reduce nccl needs the mirrored or multi-worker strategy");
    }
    if (!why_not.empty()) {
      TP_THROW(InvalidArgument, "train", "all_reduce nccl cannot serve these devices: ", why_not,
               "; use all_reduce ring (or auto, which picks it for them)");
    }
    return {AllReduce::nccl, "all-reduce: nccl (asked for)"};
  }
  if (multi_worker && requested != AllReduce::mpi) {
    TP_THROW(InvalidArgument, "train",
             "the multi-worker strategy reduces across the workers through MPI or NCCL; "
             "all_reduce '",
             name_of(requested), "' must be auto, mpi or nccl");
  }
  if (mirrored && requested == AllReduce::mpi) {
    TP_THROW(InvalidArgument, "train",
             "all_reduce mpi crosses the workers of an mpirun job: use the multi-worker "
             "strategy, or ring, reduce_to_one or nccl for the mirrored strategy");
  }
  return {requested, ""};
}

}  // namespace tp::train
