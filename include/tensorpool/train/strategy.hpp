#pragma once
// Distribution strategies: where a model's replicas run and how their gradients meet.
//   one:      OneDeviceStrategy: one replica on one device.
//   mirrored: MirroredStrategy: one replica per device, variables replicated (identically initialised), the
//             global batch split between replicas, each replica's forward and backward on its device's
//             stream, gradients all-reduced (ring, or reduction to one device) and the same update applied
//             everywhere; each replica's loss is scaled by the global batch, so the sum is the global mean.

#include <string>
#include <vector>

namespace tp::train {

struct Strategy {
  enum class Kind { one, mirrored };
  Kind kind = Kind::one;
  std::vector<std::string> devices{};  // empty: the first accelerator (one) or every accelerator (mirrored)
  std::string all_reduce = "ring";     // "ring" or "reduce_to_one"

  static Strategy one_device(std::string device = {}) {
    return {Kind::one, device.empty() ? std::vector<std::string>{} : std::vector<std::string>{device}, "ring"};
  }
  static Strategy mirrored(std::vector<std::string> devices = {}, std::string all_reduce = "ring") {
    return {Kind::mirrored, std::move(devices), std::move(all_reduce)};
  }
};

}  // namespace tp::train
