// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for the data tests: a temporary directory removed at the end of each test, raw file bytes, the
// message of the tp::DataError an action throws, a small cpu device for batches, and a synthetic dataset.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include <unistd.h>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/data/dataset.hpp"
#include "tensorpool/data/idx.hpp"

namespace tp::data::testing {

// A fresh directory under the system's temp directory, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("tp_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(file.good()) << "cannot write " << path;
}

inline std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// The what() of the tp::DataError `action` throws; "" (and a test failure) when it throws nothing.
template <typename Action>
std::string data_error_message(Action&& action) {
  try {
    action();
  } catch (const DataError& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected a tp::DataError";
  return "";
}

template <typename Action>
std::string invalid_argument_message(Action&& action) {
  try {
    action();
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected a tp::InvalidArgument";
  return "";
}

// A u8 array of `dims` whose element i is (i * 7 + offset) mod 256.
inline IdxArray pattern_u8(std::vector<std::int64_t> dims, int offset = 0) {
  std::int64_t count = 1;
  for (const std::int64_t dim : dims) count *= dim;
  std::vector<std::uint8_t> values(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::uint8_t>((i * 7 + offset) % 256);
  return IdxArray::of<std::uint8_t>(std::move(dims), values);
}

// n examples of `side` x `side` u8 pixels; example i's pixels all equal i mod 256 and its label is i, so a
// batch tells which examples it holds.
inline Dataset numbered_dataset(std::int64_t n, std::int64_t side = 2) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n * side * side));
  for (std::int64_t i = 0; i < n; ++i) {
    std::fill_n(pixels.begin() + i * side * side, side * side, static_cast<std::uint8_t>(i % 256));
  }
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  std::iota(labels.begin(), labels.end(), 0);
  return Dataset::from_arrays(IdxArray::of<std::uint8_t>({n, side, side}, pixels),
                              IdxArray::of<std::int32_t>({n}, labels));
}

// A host device for batches (the staging memory itself comes from the dataset's pinned stack).
inline std::unique_ptr<device::Device> make_cpu_device() {
  return device::testing::make_device(device::testing::Backend::cpu, 64 * kMiB);
}

}  // namespace tp::data::testing
