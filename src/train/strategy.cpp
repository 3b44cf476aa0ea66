// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/strategy.hpp"

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
  TP_THROW(InvalidArgument, "train", "all_reduce '", text,
           "' is not ring, reduce_to_one (mirrored), mpi (multi_worker) or none (parameter_server)");
}

std::string_view name_of(AllReduce algorithm) {
  switch (algorithm) {
    case AllReduce::ring: return "ring";
    case AllReduce::reduce_to_one: return "reduce_to_one";
    case AllReduce::mpi: return "mpi";
    case AllReduce::none: return "none";
  }
  return "ring";
}

}  // namespace tp::train
