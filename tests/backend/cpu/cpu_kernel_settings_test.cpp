// SPDX-License-Identifier: Apache-2.0
// The CPU kernels' settings are per device (device::KernelOptions): two devices configured with different
// GEMM libraries each compute their matmuls with their own, a Session applies its options to its devices
// only, and a refused value names the option and the choices and changes nothing.

#include <gtest/gtest.h>

#include <bit>
#include <cstddef>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernel_settings.hpp"
#include "backend/cpu/kernel_test_support.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/graph/graph.hpp"
#include "tensorpool/ops/linalg.hpp"
#include "tensorpool/runtime/session.hpp"

namespace tp::backend::cpu {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
const memory::GetEnv kNoEnv = [](const char*) -> const char* { return nullptr; };

device::DeviceManagerOptions two_sim_devices(device::KernelOptions kernels = {}) {
  device::DeviceManagerOptions options;
  options.sim_devices = 2;
  options.sim_memory_bytes = 64 * kMiB;
  options.cpu_memory_bytes = 256 * kMiB;
  options.device_options.kernels = std::move(kernels);
  return options;
}

// The main job's forward GEMM, on which OpenBLAS and oneDNN sum in different orders (cpu_gemm_test).
constexpr std::int64_t kM = 128, kN = 512, kK = 784;

std::vector<float> product_on(device::Device& device, const std::vector<float>& a, const std::vector<float>& b) {
  const Tensor a_on = Tensor::from_vector<float>(a, Shape({kM, kK}), device);
  const Tensor b_on = Tensor::from_vector<float>(b, Shape({kK, kN}), device);
  return ops::matmul(a_on, b_on).to_vector<float>();
}

// A choice covers every product of its shape class (m, n and k each rounded up to a power of two), and
// reports the product that first timed it, in this process or, read from the machine's cache, in another:
// another test's product of the same class may have been the one timed.
bool same_shape_class(const device::GemmChoice& choice) {
  const auto rounded = [](std::int64_t extent) { return std::bit_ceil(static_cast<std::uint64_t>(extent)); };
  return rounded(choice.m) == rounded(kM) && rounded(choice.n) == rounded(kN) && rounded(choice.k) == rounded(kK);
}

std::size_t differing(const std::vector<float>& x, const std::vector<float>& y) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < x.size(); ++i) count += std::memcmp(&x[i], &y[i], sizeof(float)) != 0;
  return count;
}

class KernelSettings : public ::testing::Test {
 protected:
  void TearDown() override { set_intra_op_threads(1); }
};

TEST_F(KernelSettings, TwoDevicesWithDifferentGemmLibrariesEachComputeWithTheirs) {
  device::DeviceManager manager(two_sim_devices(), kNoEnv);
  device::Device& cpu = manager.device("cpu:0");
  device::Device& onednn = manager.device("sim:0");
  device::Device& openblas = manager.device("sim:1");
  onednn.configure_kernels({.gemm_library = "onednn"});
  openblas.configure_kernels({.gemm_library = "openblas"});
  EXPECT_EQ(gemm_library_of(onednn), GemmLibrary::onednn);
  EXPECT_EQ(gemm_library_of(openblas), GemmLibrary::openblas);
  EXPECT_EQ(gemm_library_of(cpu), GemmLibrary::automatic);  // what a device starts with

  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  const std::vector<float> a = tp_test::random_vector<float>(rng, kM * kK);
  const std::vector<float> b = tp_test::random_vector<float>(rng, kK * kN);
  // Each library's bits, from cpu:0 switched between them.
  cpu.configure_kernels({.gemm_library = "openblas"});
  const std::vector<float> reference_openblas = product_on(cpu, a, b);
  cpu.configure_kernels({.gemm_library = "onednn"});
  const std::vector<float> reference_onednn = product_on(cpu, a, b);
  ASSERT_GT(differing(reference_onednn, reference_openblas), 0U)
      << "the two libraries gave the same bits: this test could not tell them apart";

  EXPECT_EQ(differing(product_on(onednn, a, b), reference_onednn), 0U) << "sim:0 did not compute with oneDNN";
  EXPECT_EQ(differing(product_on(openblas, a, b), reference_openblas), 0U) << "sim:1 did not compute with OpenBLAS";
}

// "auto" (a device's default): the product goes to the library measured faster for its shape class, and every
// cpu and sim device reports the process's choices.
TEST_F(KernelSettings, AutoComputesWithTheChoiceEveryDeviceReports) {
  device::DeviceManager manager(two_sim_devices(), kNoEnv);
  device::Device& sim = manager.device("sim:0");
  ASSERT_EQ(gemm_library_of(sim), GemmLibrary::automatic);
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  const std::vector<float> a = tp_test::random_vector<float>(rng, kM * kK);
  const std::vector<float> b = tp_test::random_vector<float>(rng, kK * kN);
  const std::vector<float> automatic = product_on(sim, a, b);
  std::optional<device::GemmChoice> choice;
  for (const device::GemmChoice& made : sim.gemm_choices()) {
    if (same_shape_class(made) && !made.transpose_a && !made.transpose_b) choice = made;
  }
  ASSERT_TRUE(choice.has_value()) << "no choice reported for the class of " << kM << " x " << kN << " x " << kK;
  EXPECT_TRUE(choice->library == "openblas" || choice->library == "onednn") << choice->library;
  EXPECT_GT(choice->openblas_gflops, 0.0);
  EXPECT_GT(choice->onednn_gflops, 0.0);
  device::Device& pinned = manager.device("sim:1");
  pinned.configure_kernels({.gemm_library = choice->library});
  EXPECT_EQ(differing(automatic, product_on(pinned, a, b)), 0U) << "auto did not compute with " << choice->library;
  EXPECT_EQ(manager.device("cpu:0").gemm_choices().size(), sim.gemm_choices().size()) << "one table per process";
}

TEST_F(KernelSettings, DeviceOptionsGiveEveryDeviceItsLibraryFromTheStart) {
  device::DeviceManager manager(two_sim_devices({.gemm_library = "onednn"}), kNoEnv);
  for (const char* name : {"cpu:0", "sim:0", "sim:1"}) {
    EXPECT_EQ(gemm_library_of(manager.device(name)), GemmLibrary::onednn) << name;
  }
}

TEST_F(KernelSettings, ASessionConfiguresItsDevicesAndCpu0Only) {
  device::DeviceManager manager(two_sim_devices(), kNoEnv);
  const runtime::Session session(
      graph::Graph(),
      {.visible_devices = {"sim:0"}, .intra_op_threads = 3, .gemm_library = "onednn", .devices = &manager});
  EXPECT_EQ(gemm_library_of(manager.device("sim:0")), GemmLibrary::onednn);
  EXPECT_EQ(gemm_library_of(manager.device("cpu:0")), GemmLibrary::onednn);  // fetches and soft placement land here
  EXPECT_EQ(gemm_library_of(manager.device("sim:1")), GemmLibrary::automatic);
  EXPECT_EQ(intra_op_threads(), 3);
  // Empty and 0 leave the settings as they are.
  const runtime::Session plain(graph::Graph(), {.devices = &manager});
  EXPECT_EQ(gemm_library_of(manager.device("sim:0")), GemmLibrary::onednn);
  EXPECT_EQ(intra_op_threads(), 3);
}

TEST_F(KernelSettings, ABadValueIsRefusedNamingTheOptionAndTheChoicesAndChangesNothing) {
  device::DeviceManager manager(two_sim_devices(), kNoEnv);
  device::Device& sim = manager.device("sim:0");
  sim.configure_kernels({.intra_op_threads = 2, .gemm_library = "onednn"});
  tp_test::expect_invalid([&] { sim.configure_kernels({.intra_op_threads = 4, .gemm_library = "mkl"}); },
                          {"sim:0", "gemm_library", "'mkl'", "auto", "openblas", "onednn"});
  tp_test::expect_invalid([&] { sim.configure_kernels({.intra_op_threads = -1}); },
                          {"sim:0", "intra_op_threads = -1", ">= 0"});
  tp_test::expect_invalid([&] { sim.configure_kernels({.intra_op_threads = kMaxIntraOpThreads + 1}); },
                          {"sim:0", "intra_op_threads", std::to_string(kMaxIntraOpThreads)});
  EXPECT_EQ(gemm_library_of(sim), GemmLibrary::onednn);
  EXPECT_EQ(intra_op_threads(), 2);

  tp_test::expect_invalid(
      [&] { const runtime::Session session(graph::Graph(), {.gemm_library = "MKL", .devices = &manager}); },
      {"gemm_library", "'MKL'", "auto", "openblas", "onednn"});
  EXPECT_EQ(gemm_library_of(manager.device("cpu:0")), GemmLibrary::automatic);

  device::DeviceManager refused(two_sim_devices({.gemm_library = "blis"}), kNoEnv);
  tp_test::expect_invalid([&] { refused.devices(); }, {"gemm_library", "'blis'", "openblas", "onednn"});
}

// Device::warm_up_kernels: oneDNN generates its kernels on a device that may use it, once per process, and the
// products after it keep oneDNN's bits; a device pinned to OpenBLAS generates nothing. Each test runs in a
// process of its own (gtest_discover_tests), so nothing is generated before it.
TEST_F(KernelSettings, WarmUpOnAnOpenblasDeviceGeneratesNothing) {
  device::DeviceManager manager(two_sim_devices({.gemm_library = "openblas"}), kNoEnv);
  manager.device("sim:0").warm_up_kernels();
  EXPECT_FALSE(gemm_library_warmed_up());
}

TEST_F(KernelSettings, WarmUpGeneratesOnednnKernelsOnce) {
  device::DeviceManager manager(two_sim_devices(), kNoEnv);
  device::Device& automatic = manager.device("sim:0");
  device::Device& onednn = manager.device("sim:1");
  onednn.configure_kernels({.gemm_library = "onednn"});
  ASSERT_FALSE(gemm_library_warmed_up());
  automatic.warm_up_kernels();  // "auto" times oneDNN at its first product: it warms oneDNN up too
  ASSERT_TRUE(gemm_library_warmed_up());
  onednn.warm_up_kernels();  // the second call finds the kernels generated

  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  const std::vector<float> a = tp_test::random_vector<float>(rng, kM * kK);
  const std::vector<float> b = tp_test::random_vector<float>(rng, kK * kN);
  std::vector<float> reference(static_cast<std::size_t>(kM * kN));
  matmul<float>(Transpose::no, Transpose::no, kM, kN, kK, 1.0F, a.data(), b.data(), 0.0F, reference.data(),
                GemmLibrary::onednn);
  EXPECT_EQ(differing(product_on(onednn, a, b), reference), 0U);
}

}  // namespace
}  // namespace tp::backend::cpu
