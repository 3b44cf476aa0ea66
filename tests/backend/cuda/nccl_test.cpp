// SPDX-License-Identifier: Apache-2.0
// The nccl communicator (tensorpool/distribute/nccl.hpp). Without a GPU: a NCCL that cannot be loaded is a
// tp::DeviceError naming the library and the fix (TP_NCCL_LIBRARY pointed at a missing file), and the
// toolkit's NCCL loads and reports its version. With one GPU: two logical devices of it are refused (NCCL takes
// one participant per GPU). With two or more GPUs: all-reduce, reduce-scatter, all-gather and broadcast give
// the exact sums (small integers in float32: any summation order is exact), for equal and unequal chunks.
#include "tensorpool/distribute/nccl.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/distribute/communicator.hpp"

namespace tp::distribute {
namespace {

// Whether `text` contains `part` (gmock's HasSubstr without linking gmock).
::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

constexpr const char* kToolkitNccl = "/usr/local/cuda/lib64/libnccl.so.2";

bool cuda_backend_built() {
  return device::cuda_unavailable_reason().find("this build has no CUDA backend") == std::string::npos;
}

TEST(NcclLoading, AMissingLibraryIsADeviceErrorNamingItAndTheFix) {
  const std::string missing = "/nonexistent/tensorpool-test/libnccl-missing.so.2";
  const backend::cuda::testing::EnvironmentScope scope("TP_NCCL_LIBRARY", missing);
  try {
    static_cast<void>(make_communicator("nccl"));
    FAIL() << "make_communicator(\"nccl\") loaded " << missing;
  } catch (const DeviceError& error) {
    if (!cuda_backend_built()) {
      EXPECT_TRUE(contains(error.what(), "CUDA backend"));
      return;
    }
    EXPECT_TRUE(contains(error.what(), "cannot load NCCL (" + missing + ")"));
    EXPECT_TRUE(contains(error.what(), "TP_NCCL_LIBRARY"));
    EXPECT_TRUE(contains(error.what(), "--all-reduce ring"));
  }
  EXPECT_THROW(static_cast<void>(nccl_version()), DeviceError);
}

TEST(NcclLoading, TheToolkitsLibraryLoadsWithoutAGpu) {
  if (!cuda_backend_built()) GTEST_SKIP() << device::cuda_unavailable_reason();
  if (!std::filesystem::exists(kToolkitNccl)) GTEST_SKIP() << "no " << kToolkitNccl << " on this machine";
  const backend::cuda::testing::EnvironmentScope scope("TP_NCCL_LIBRARY", kToolkitNccl);
  EXPECT_EQ(nccl_version().rfind("2.", 0), 0U) << nccl_version();
  const auto communicator = make_communicator("nccl");
  EXPECT_EQ(communicator->name(), "nccl");
  EXPECT_EQ(communicator->scratch_elements(1000, 4, 0), 0) << "NCCL works in place";
}

// Skips unless NCCL loads (TP_NCCL_LIBRARY or the loader's path) and `gpus` GPUs are there.
#define TP_REQUIRE_NCCL_GPUS(gpus)                                                      \
  do {                                                                                  \
    TP_REQUIRE_CUDA();                                                                  \
    const std::size_t found = ::tp::device::cuda_physical_devices().size();             \
    if (found < (gpus)) GTEST_SKIP() << "needs " << (gpus) << " GPUs, found " << found; \
    try {                                                                               \
      static_cast<void>(nccl_version());                                                \
    } catch (const DeviceError& error) {                                                \
      GTEST_SKIP() << error.what();                                                     \
    }                                                                                   \
  } while (false)

TEST(NcclCollectives, TwoLogicalDevicesOfOneGpuAreRefused) {
  TP_REQUIRE_NCCL_GPUS(1U);
  constexpr std::size_t kLimit = std::size_t{64} << 20;
  const auto manager = backend::cuda::testing::make_manager(backend::cuda::testing::cuda_options({kLimit, kLimit}));
  std::vector<Tensor> tensors;
  for (const char* name : {"cuda:0", "cuda:1"}) {
    tensors.push_back(Tensor::from_vector<float>(std::vector<float>{1, 2, 3}, Shape{3}, manager->device(name)));
  }
  const auto communicator = make_communicator("nccl");
  try {
    communicator->all_reduce(tensors, tensors);
    FAIL() << "two participants on GPU 0 were accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_TRUE(contains(error.what(), "both on GPU 0"));
    EXPECT_TRUE(contains(error.what(), "--all-reduce ring"));
  }
  for (const Tensor& tensor : tensors) EXPECT_EQ(tensor.to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

// Participant p's element i: p * 1000 + i (exact in float32 for these sizes).
std::vector<Tensor> numbered(device::DeviceManager& manager, std::size_t gpus, std::int64_t elements) {
  std::vector<Tensor> tensors;
  for (std::size_t p = 0; p < gpus; ++p) {
    std::vector<float> values(static_cast<std::size_t>(elements));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((p * 1000) + i);
    tensors.push_back(Tensor::from_vector<float>(values, Shape{elements}, manager.device("cuda:" + std::to_string(p))));
  }
  return tensors;
}

float sum_at(std::size_t gpus, std::size_t i) {
  float sum = 0;
  for (std::size_t p = 0; p < gpus; ++p) sum += static_cast<float>((p * 1000) + i);
  return sum;
}

TEST(NcclCollectives, SumsGathersAndBroadcastsAcrossGpus) {
  TP_REQUIRE_NCCL_GPUS(2U);
  const std::size_t gpus = device::cuda_physical_devices().size();
  const auto manager = backend::cuda::testing::make_manager(backend::cuda::testing::cuda_options());
  const auto communicator = make_communicator("nccl");
  // Equal chunks (NCCL's reduce-scatter and all-gather) and unequal ones (per-chunk reduce and broadcast).
  for (const std::int64_t elements : {static_cast<std::int64_t>(gpus) * 64, static_cast<std::int64_t>(gpus) * 64 + 3}) {
    SCOPED_TRACE("elements " + std::to_string(elements));
    std::vector<Tensor> tensors = numbered(*manager, gpus, elements);
    communicator->all_reduce(tensors, tensors);
    for (std::size_t p = 0; p < gpus; ++p) {
      const std::vector<float> values = tensors[p].to_vector<float>();
      for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], sum_at(gpus, i)) << "participant " << p;
    }

    tensors = numbered(*manager, gpus, elements);
    communicator->reduce_scatter(tensors, tensors);
    for (std::size_t p = 0; p < gpus; ++p) {
      const std::vector<float> values = tensors[p].to_vector<float>();
      const auto [begin, end] = Communicator::chunk(elements, gpus, p);
      for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i) {
        ASSERT_EQ(values[i], sum_at(gpus, i)) << "participant " << p << "'s chunk";
      }
    }

    tensors = numbered(*manager, gpus, elements);
    communicator->all_gather(tensors);
    for (std::size_t p = 0; p < gpus; ++p) {
      const std::vector<float> values = tensors[p].to_vector<float>();
      for (std::size_t owner = 0; owner < gpus; ++owner) {
        const auto [begin, end] = Communicator::chunk(elements, gpus, owner);
        for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i) {
          ASSERT_EQ(values[i], static_cast<float>((owner * 1000) + i)) << "participant " << p << ", chunk " << owner;
        }
      }
    }

    tensors = numbered(*manager, gpus, elements);
    communicator->broadcast(tensors, 1);
    for (std::size_t p = 0; p < gpus; ++p) {
      const std::vector<float> values = tensors[p].to_vector<float>();
      for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], static_cast<float>(1000 + i));
    }
  }
}

}  // namespace
}  // namespace tp::distribute
