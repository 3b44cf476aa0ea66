// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/strategy.hpp"

#include "tensorpool/core/error.hpp"

namespace tp::train {

Shard parse_shard(std::string_view text) {
  if (text == "none") return Shard::none;
  if (text == "optimizer") return Shard::optimizer;
  if (text == "gradients") return Shard::gradients;
  TP_THROW(InvalidArgument, "train", "shard '", text,
           "' is not none, optimizer (ZeRO-1: optimizer state split between replicas) or gradients (ZeRO-2: "
           "gradients too)");
}

std::string_view name_of(Shard shard) {
  switch (shard) {
    case Shard::none: return "none";
    case Shard::optimizer: return "optimizer";
    case Shard::gradients: return "gradients";
  }
  return "none";
}

}  // namespace tp::train
