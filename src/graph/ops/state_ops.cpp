// Optimizer updates: ApplySgd(var, grad, velocity) and ApplyAdam(var, grad, m, v) update their inputs in
// place (var and the slots are the session's persistent tensors) and have no outputs. Hyperparameters are
// attributes with Keras's defaults; Adam's bias-correction step is KernelContext::step (1-based).

#include "graph/ops/op_support.hpp"
#include "tensorpool/ops/optimizer.hpp"

namespace tp::graph::detail {

namespace {

constexpr double kSgdLearningRate = 0.01;
constexpr double kAdamLearningRate = 1e-3;
constexpr double kAdamBeta1 = 0.9;
constexpr double kAdamBeta2 = 0.999;
constexpr double kAdamEpsilon = 1e-7;

// Every input has var's dtype and shape.
void check_slots(const InferenceContext& context, const std::vector<std::string_view>& roles) {
  require_float(context, 0, roles[0]);
  for (std::size_t index = 1; index < roles.size(); ++index) {
    require_same_dtype(context, 0, roles[0], static_cast<int>(index), roles[index]);
    merge_shapes(context, 0, roles[0], static_cast<int>(index), roles[index]);
  }
}

tp::ops::SgdOptions sgd_options(const Node& node) {
  return tp::ops::SgdOptions{.learning_rate = non_negative_attribute(node, "learning_rate", kSgdLearningRate),
                             .momentum = non_negative_attribute(node, "momentum", 0.0),
                             .nesterov = attribute_bool(node, "nesterov", false)};
}

tp::ops::AdamOptions adam_options(const Node& node) {
  return tp::ops::AdamOptions{.learning_rate = non_negative_attribute(node, "learning_rate", kAdamLearningRate),
                              .beta1 = unit_attribute(node, "beta1", kAdamBeta1),
                              .beta2 = unit_attribute(node, "beta2", kAdamBeta2),
                              .epsilon = non_negative_attribute(node, "epsilon", kAdamEpsilon)};
}

std::vector<TensorType> infer_sgd(const InferenceContext& context) {
  check_slots(context, {"var", "grad", "velocity"});
  sgd_options(context.node);
  return {};
}

std::vector<TensorType> infer_adam(const InferenceContext& context) {
  check_slots(context, {"var", "grad", "m", "v"});
  adam_options(context.node);
  return {};
}

void sgd_kernel(KernelContext& context) {
  tp::ops::sgd_update(context.inputs[0], context.inputs[1], context.inputs[2], sgd_options(context.node),
                      op_context(context));
}

void adam_kernel(KernelContext& context) {
  if (context.step < 1) {
    TP_GRAPH_FAIL(context.node, "step ", context.step, " must be >= 1 (the session passes the 1-based training step)");
  }
  tp::ops::adam_update(context.inputs[0], context.inputs[1], context.inputs[2], context.inputs[3], context.step,
                       adam_options(context.node), op_context(context));
}

}  // namespace

void register_state_ops(OpRegistry& registry) {
  registry.add(OpDef{.name = "ApplySgd",
                     .num_inputs = 3,
                     .num_outputs = 0,
                     .infer = infer_sgd,
                     .kernels = cpu_and_sim(sgd_kernel),
                     .stateful = true});
  registry.add(OpDef{.name = "ApplyAdam",
                     .num_inputs = 4,
                     .num_outputs = 0,
                     .infer = infer_adam,
                     .kernels = cpu_and_sim(adam_kernel),
                     .stateful = true});
}

}  // namespace tp::graph::detail
