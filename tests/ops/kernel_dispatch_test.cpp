// SPDX-License-Identifier: Apache-2.0
// The seam between the ops and the backends (tensorpool/ops/kernel_table.hpp): the cpu and sim factories
// register one shared table with every entry, and an op whose backend lacks its kernel throws
// tp::DeviceError naming the op and the device after validating its arguments.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/ops_test_support.hpp"
#include "tensorpool/ops/kernel_table.hpp"
#include "tensorpool/ops/nn.hpp"

namespace tp::ops {
namespace {

using kernels::KernelTable;

template <typename Action>
void expect_device_error(Action action, const std::vector<std::string>& fragments) {
  try {
    action();
    ADD_FAILURE() << "no tp::DeviceError thrown";
  } catch (const DeviceError& error) {
    const std::string text = error.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(text.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << text;
    }
  }
}

// Registers `table` for `kind` until the scope ends, then puts the previous one back.
class ScopedKernels {
 public:
  ScopedKernels(device::DeviceKind kind, const KernelTable& table)
      : kind_(kind), previous_(kernels::kernels_for(kind)) {
    kernels::register_kernels(kind, table);
  }
  ~ScopedKernels() {
    if (previous_ != nullptr) kernels::register_kernels(kind_, *previous_);
  }
  ScopedKernels(const ScopedKernels&) = delete;
  ScopedKernels& operator=(const ScopedKernels&) = delete;

 private:
  device::DeviceKind kind_;
  const KernelTable* previous_;
};

TEST(KernelDispatch, CpuAndSimRegisterOneTableWithEveryEntry) {
  auto cpu = testing::make_device(testing::Backend::cpu);
  auto sim = testing::make_device(testing::Backend::sim);
  const KernelTable* table = kernels::kernels_for(device::DeviceKind::cpu);
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(kernels::kernels_for(device::DeviceKind::sim), table) << "sim shares the cpu backend's kernels";
  EXPECT_NE(table->binary, nullptr);
  EXPECT_NE(table->scale, nullptr);
  EXPECT_NE(table->add_scaled, nullptr);
  EXPECT_NE(table->sum_across_peers, nullptr);
  EXPECT_NE(table->broadcast_axis, nullptr);
  EXPECT_NE(table->scale_rows, nullptr);
  EXPECT_NE(table->cast, nullptr);
  EXPECT_NE(table->all_finite, nullptr);
  EXPECT_NE(table->fill, nullptr);
  EXPECT_NE(table->random, nullptr);
  EXPECT_NE(table->matmul, nullptr);
  EXPECT_NE(table->correct_count, nullptr);
  EXPECT_NE(table->bias_add, nullptr);
  EXPECT_NE(table->bias_add_grad, nullptr);
  EXPECT_NE(table->relu, nullptr);
  EXPECT_NE(table->relu_grad, nullptr);
  EXPECT_NE(table->softmax, nullptr);
  EXPECT_NE(table->cross_entropy, nullptr);
  EXPECT_NE(table->sgd, nullptr);
  EXPECT_NE(table->adam, nullptr);
  EXPECT_NE(table->reduce, nullptr);
  EXPECT_NE(table->argmax, nullptr);
}

TEST(KernelDispatch, RegisteringReplacesTheTableOfOneKindOnly) {
  auto cpu = testing::make_device(testing::Backend::cpu);
  auto sim = testing::make_device(testing::Backend::sim);
  const KernelTable* shared = kernels::kernels_for(device::DeviceKind::cpu);
  static const KernelTable kEmpty{};
  {
    const ScopedKernels scoped(device::DeviceKind::sim, kEmpty);
    EXPECT_EQ(kernels::kernels_for(device::DeviceKind::sim), &kEmpty);
    EXPECT_EQ(kernels::kernels_for(device::DeviceKind::cpu), shared);
  }
  EXPECT_EQ(kernels::kernels_for(device::DeviceKind::sim), shared);
}

// A backend whose table lacks an entry: the op still validates first (InvalidArgument on bad input), then
// names itself and the device instead of running anything.
TEST(KernelDispatch, AnOpWithoutAKernelOnItsBackendThrowsNamingTheOpAndTheDevice) {
  auto sim = testing::make_device(testing::Backend::sim);
  static KernelTable without_relu;
  without_relu = *kernels::kernels_for(device::DeviceKind::sim);
  without_relu.relu = nullptr;
  const ScopedKernels scoped(device::DeviceKind::sim, without_relu);
  const Tensor x = Tensor::from_vector<float>(std::vector<float>{-1, 2}, Shape{2}, *sim);
  const Tensor out = Tensor::from_vector<float>(std::vector<float>{0, 0}, Shape{2}, *sim);
  expect_device_error([&] { relu_into(x, out); }, {"Relu", "sim:0"});
  const Tensor labels = Tensor::from_vector<std::int32_t>(std::vector<std::int32_t>{0, 1}, Shape{2}, *sim);
  EXPECT_THROW(relu_into(labels, out), InvalidArgument) << "validation comes before the kernel lookup";
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{0, 0})) << "nothing ran";
  // The other entries still dispatch.
  EXPECT_EQ(bias_add(Tensor::from_vector<float>(std::vector<float>{1, 2}, Shape{1, 2}, *sim),
                     Tensor::from_vector<float>(std::vector<float>{10, 20}, Shape{2}, *sim))
                .to_vector<float>(),
            (std::vector<float>{11, 22}));
}

}  // namespace
}  // namespace tp::ops
