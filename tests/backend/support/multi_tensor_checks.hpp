// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checks of the multi-tensor optimizer updates (ops::sgd_update_multi, adam_update_multi) on one device, shared
// by the backend suite (cpu, sim, opencl, and cuda:0 where there is one) and the cuda suite: a few steps of the
// multi-tensor update leave every entry's bytes exactly as the single update of each entry does, and a bad
// list is refused with tp::InvalidArgument naming it.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/support/conformance_support.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/ops/optimizer.hpp"

namespace tp::backend::testing {

// Entry shapes: small and odd ones, an empty one, one longer than the CPU's parallel chunk.
inline std::vector<Shape> multi_tensor_shapes() {
  return {Shape{3, 5}, Shape{7}, Shape{0}, Shape{130, 257}, Shape{1}, Shape{64, 10}};
}

// Parallel lists of float32 tensors on `device`, random in [low, high), one per shape.
inline std::vector<Tensor> random_list(const std::vector<Shape>& shapes, device::Device& device, std::mt19937& rng,
                                       double low, double high) {
  std::vector<Tensor> list;
  std::uniform_real_distribution<double> values(low, high);
  for (const Shape& shape : shapes) {
    std::vector<double> data(static_cast<std::size_t>(shape.num_elements()));
    for (double& value : data) value = values(rng);
    list.push_back(upload(data, shape, DType::f32, device));
  }
  return list;
}

inline std::vector<Tensor> copies(const std::vector<Tensor>& list, device::Device& device) {
  std::vector<Tensor> copied;
  for (const Tensor& tensor : list) copied.push_back(tensor.to(device));
  return copied;
}

inline void expect_same_bytes(const std::vector<Tensor>& multi, const std::vector<Tensor>& single,
                              const std::string& what) {
  ASSERT_EQ(multi.size(), single.size());
  for (std::size_t index = 0; index < multi.size(); ++index) {
    EXPECT_EQ(read_bytes(multi[index]), read_bytes(single[index])) << what << " entry " << index;
  }
}

// Four Adam steps and four steps of each SGD form, multi-tensor against single, bitwise.
inline void check_multi_tensor_updates(device::Device& device, const std::vector<Shape>& shapes) {
  std::mt19937 rng(test_seed());
  SCOPED_TRACE(::testing::Message() << "seed " << test_seed() << " (rerun with TP_TEST_SEED)");
  const std::vector<Tensor> params = random_list(shapes, device, rng, -1.0, 1.0);
  const std::vector<Tensor> grads = random_list(shapes, device, rng, -1.0, 1.0);
  const std::vector<Tensor> slots = random_list(shapes, device, rng, 0.0, 0.1);
  {
    const std::vector<Tensor> param = copies(params, device), m = copies(slots, device), v = copies(slots, device);
    const std::vector<Tensor> param_ref = copies(params, device), m_ref = copies(slots, device),
                              v_ref = copies(slots, device);
    const ops::AdamOptions options{.learning_rate = 0.01};
    for (std::int64_t step = 1; step <= 4; ++step) {
      ops::adam_update_multi(param, grads, m, v, step, options);
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        ops::adam_update(param_ref[k], grads[k], m_ref[k], v_ref[k], step, options);
      }
    }
    device.synchronize();
    expect_same_bytes(param, param_ref, "adam param");
    expect_same_bytes(m, m_ref, "adam m");
    expect_same_bytes(v, v_ref, "adam v");
    EXPECT_NE(read_bytes(param[0]), read_bytes(params[0])) << "it did update";
  }
  for (const ops::SgdOptions& options :
       {ops::SgdOptions{.learning_rate = 0.1}, ops::SgdOptions{.learning_rate = 0.1, .momentum = 0.9},
        ops::SgdOptions{.learning_rate = 0.1, .momentum = 0.9, .nesterov = true}}) {
    const bool velocity = options.momentum != 0.0;
    const std::vector<Tensor> param = copies(params, device), param_ref = copies(params, device);
    const std::vector<Tensor> slot = velocity ? copies(slots, device) : std::vector<Tensor>{};
    const std::vector<Tensor> slot_ref = velocity ? copies(slots, device) : std::vector<Tensor>{};
    for (int step = 1; step <= 4; ++step) {
      ops::sgd_update_multi(param, grads, slot, options);
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        ops::sgd_update(param_ref[k], grads[k], velocity ? slot_ref[k] : Tensor{}, options);
      }
    }
    device.synchronize();
    const std::string what = "sgd momentum " + std::to_string(options.momentum) + (options.nesterov ? " nesterov" : "");
    expect_same_bytes(param, param_ref, what + " param");
    expect_same_bytes(slot, slot_ref, what + " velocity");
  }
}

// Length, dtype, shape and device mismatches, each refused naming the list and entry; `other` (may be null) is
// a device other than `device`.
inline void check_multi_tensor_errors(device::Device& device, device::Device* other) {
  const Tensor a = upload({1, 2, 3}, Shape{3}, DType::f32, device);
  const Tensor b = upload({1, 2}, Shape{2}, DType::f32, device);
  const Tensor wide = upload({1, 2, 3}, Shape{3}, DType::f64, device);
  const std::vector<Tensor> one{a}, two{a, b};
  expect_invalid([&] { ops::adam_update_multi(two, one, two, two, 1, {}); },
                 {"AdamUpdateMulti", "2 params but 1 grads"});
  expect_invalid([&] { ops::adam_update_multi({}, {}, {}, {}, 1, {}); }, {"AdamUpdateMulti", "no params"});
  expect_invalid([&] { ops::adam_update_multi(one, std::vector<Tensor>{wide}, one, one, 1, {}); },
                 {"AdamUpdateMulti", "grads[0]", "float64", "float32"});
  expect_invalid(
      [&] {
        ops::sgd_update_multi(two, std::vector<Tensor>{a, a}, {}, {});
      },
      {"SgdUpdateMulti", "grads[1]"});
  expect_invalid([&] { ops::sgd_update_multi(one, one, {}, {.momentum = 0.9}); },
                 {"SgdUpdateMulti", "momentum", "velocities"});
  expect_invalid([&] { ops::adam_update_multi(one, one, one, one, 0, {}); }, {"AdamUpdateMulti", "step 0"});
  if (other != nullptr) {
    const Tensor there = upload({1, 2, 3}, Shape{3}, DType::f32, *other);
    expect_invalid([&] { ops::adam_update_multi(one, one, one, std::vector<Tensor>{there}, 1, {}); },
                   {"AdamUpdateMulti", "v[0]", other->name()});
  }
  device.synchronize();
  EXPECT_EQ(download(a), (std::vector<double>{1, 2, 3})) << "a refused call touches nothing";
}

}  // namespace tp::backend::testing
