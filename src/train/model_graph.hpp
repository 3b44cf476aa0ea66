#pragma once
// The training graph of a Sequential model under a strategy: for each replica r (on devices[r]) the
// placeholders "replica_r/x" and "replica_r/labels", the forward pass over that replica's copy of the
// variables, its loss (the per-example losses summed and scaled by the fed "inv_global_batch", so the
// replicas' losses add up to the global mean), the number of correct predictions, the predictions, the
// gradients, then (mirrored) one AllReduce per parameter and the optimizer's update of every replica.
//
// Invariants: every replica's variables are listed in the same order in `variables[r]`, with identical
// initialisers, so replicas start and stay bitwise equal; one device means one replica and no AllReduce.

#include <cstdint>
#include <string>
#include <vector>

#include "tensorpool/graph/graph.hpp"
#include "tensorpool/train/layers.hpp"

namespace tp::train {

struct ModelSpec {
  std::vector<std::int64_t> input_shape;  // one example's shape, e.g. {784} or {28, 28} (flattened)
  std::vector<Dense> layers;
  Optimizer optimizer = Adam{};
  Loss loss = Loss::sparse_categorical_crossentropy;
  bool from_logits = false;
  std::string all_reduce = "ring";
  std::uint64_t seed = 0;
};

struct ReplicaNodes {
  std::string x, labels, loss, correct, predictions;
};

struct ModelGraph {
  graph::Graph graph;
  std::vector<ReplicaNodes> replicas;
  std::vector<std::string> updates;                  // optimizer update nodes (run as targets)
  std::vector<std::vector<std::string>> variables;   // per replica: parameters then optimizer slots
  std::string inv_global_batch = "inv_global_batch";
  bool has_accuracy = false;
};

// Throws tp::InvalidArgument naming the bad layer or setting.
ModelGraph build_model_graph(const ModelSpec& spec, const std::vector<std::string>& devices);

}  // namespace tp::train
