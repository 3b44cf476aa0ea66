// SPDX-License-Identifier: Apache-2.0
// The CPU multi-tensor updates (sgd_update_multi, adam_update_multi): every entry bitwise as the single
// update of that entry on one thread, for 1 to 4 intra-op threads, with entries that cut the parallel chunks
// anywhere (lengths that are not multiples of the chunk, an empty entry, one entry spanning several chunks).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernel_test_support.hpp"
#include "backend/cpu/kernels/optimizer.hpp"

namespace tp::backend::cpu {
namespace {

// Entry lengths: a short one, an empty one, one across two chunks, one across several, a tail.
const std::vector<std::int64_t> kLengths = {5, 0, 16385, 70001, 3, 1023};

template <typename T>
struct State {
  std::vector<std::vector<T>> param, grad, first, second;  // first, second: m and v, or velocity
};

template <typename T>
State<T> random_state(std::mt19937& rng) {
  State<T> state;
  for (const std::int64_t length : kLengths) {
    state.param.push_back(tp_test::random_vector<T>(rng, length));
    state.grad.push_back(tp_test::random_vector<T>(rng, length));
    state.first.push_back(tp_test::random_vector<T>(rng, length, 0.0, 0.1));
    state.second.push_back(tp_test::random_vector<T>(rng, length, 0.0, 0.1));
  }
  return state;
}

class MultiTensorUpdate : public ::testing::Test {
 protected:
  void TearDown() override { set_intra_op_threads(1); }
};

template <typename T>
void check_adam() {
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  const State<T> initial = random_state<T>(rng);
  const T lr = T(1e-3), beta1 = T(0.9), beta2 = T(0.999), epsilon = T(1e-7);
  set_intra_op_threads(1);
  State<T> single = initial;
  for (std::int64_t step = 1; step <= 3; ++step) {
    for (std::size_t k = 0; k < kLengths.size(); ++k) {
      adam_update<T>(single.param[k].data(), single.grad[k].data(), single.first[k].data(), single.second[k].data(),
                     kLengths[k], lr, beta1, beta2, epsilon, step);
    }
  }
  for (const int threads : {1, 2, 3, 4}) {
    set_intra_op_threads(threads);
    State<T> multi = initial;
    std::vector<AdamTensors<T>> tensors;
    for (std::size_t k = 0; k < kLengths.size(); ++k) {
      tensors.push_back(
          {multi.param[k].data(), multi.grad[k].data(), multi.first[k].data(), multi.second[k].data(), kLengths[k]});
    }
    for (std::int64_t step = 1; step <= 3; ++step) adam_update_multi<T>(tensors, lr, beta1, beta2, epsilon, step);
    for (std::size_t k = 0; k < kLengths.size(); ++k) {
      EXPECT_EQ(multi.param[k], single.param[k]) << threads << " threads, entry " << k;
      EXPECT_EQ(multi.first[k], single.first[k]) << threads << " threads, entry " << k;
      EXPECT_EQ(multi.second[k], single.second[k]) << threads << " threads, entry " << k;
    }
    EXPECT_NE(multi.param[3], initial.param[3]) << "it did update";
  }
}

template <typename T>
void check_sgd(T momentum, bool nesterov, bool velocity) {
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  const State<T> initial = random_state<T>(rng);
  const T lr = T(1e-2);
  set_intra_op_threads(1);
  State<T> single = initial;
  for (int step = 1; step <= 3; ++step) {
    for (std::size_t k = 0; k < kLengths.size(); ++k) {
      if (kLengths[k] == 0) continue;  // its buffers are null, which the single update refuses
      sgd_update<T>(single.param[k].data(), single.grad[k].data(), velocity ? single.first[k].data() : nullptr,
                    kLengths[k], lr, momentum, nesterov);
    }
  }
  for (const int threads : {1, 2, 3, 4}) {
    set_intra_op_threads(threads);
    State<T> multi = initial;
    std::vector<SgdTensors<T>> tensors;
    for (std::size_t k = 0; k < kLengths.size(); ++k) {
      tensors.push_back(
          {multi.param[k].data(), multi.grad[k].data(), velocity ? multi.first[k].data() : nullptr, kLengths[k]});
    }
    for (int step = 1; step <= 3; ++step) sgd_update_multi<T>(tensors, lr, momentum, nesterov);
    for (std::size_t k = 0; k < kLengths.size(); ++k) {
      EXPECT_EQ(multi.param[k], single.param[k]) << threads << " threads, entry " << k;
      EXPECT_EQ(multi.first[k], single.first[k]) << threads << " threads, entry " << k;
    }
    EXPECT_NE(multi.param[3], initial.param[3]) << "it did update";
  }
}

TEST_F(MultiTensorUpdate, AdamEqualsTheSingleUpdatesBitwiseForOneToFourThreads) {
  check_adam<float>();
  check_adam<double>();
}

TEST_F(MultiTensorUpdate, SgdEqualsTheSingleUpdatesBitwiseForOneToFourThreads) {
  check_sgd<float>(0.0F, false, false);  // no velocity buffer
  check_sgd<float>(0.9F, false, true);
  check_sgd<float>(0.9F, true, true);
  check_sgd<double>(0.9, true, true);
}

TEST_F(MultiTensorUpdate, RefusesBadArgumentsBeforeTouchingAnything) {
  std::vector<float> param(4, 1.0F), grad(4, 1.0F);
  const std::vector<SgdTensors<float>> no_velocity{{param.data(), grad.data(), nullptr, 4}};
  tp_test::expect_invalid([&] { sgd_update_multi<float>(no_velocity, 0.1F, 0.9F, false); },
                          {"sgd_update_multi", "momentum", "velocity"});
  const std::vector<AdamTensors<float>> negative{{param.data(), grad.data(), param.data(), param.data(), -1}};
  tp_test::expect_invalid([&] { adam_update_multi<float>(negative, 1e-3F, 0.9F, 0.999F, 1e-7F, 1); },
                          {"adam_update_multi", "n"});
  tp_test::expect_invalid([&] { adam_update_multi<float>({}, 1e-3F, 0.9F, 0.999F, 1e-7F, 0); },
                          {"adam_update_multi", "step"});
  EXPECT_EQ(param, std::vector<float>(4, 1.0F));
}

}  // namespace
}  // namespace tp::backend::cpu
