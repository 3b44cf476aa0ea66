// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for the checkpoint and callback tests: a temporary directory removed with the fixture, sample
// checkpoint states covering every dtype (empty tensors and a scalar included), and raw file edits.

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tensorpool/core/shape.hpp"
#include "tensorpool/train/checkpoint.hpp"

namespace tp::train::testing {

// A fresh directory under the system temp directory, removed (with its contents) on destruction.
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& label) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("tp_" + label + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// `dims` of `dtype` filled with bytes from `seed`.
inline HostTensor random_tensor(DType dtype, std::vector<std::int64_t> dims, std::uint32_t seed) {
  HostTensor tensor;
  tensor.dtype = dtype;
  tensor.bytes.resize(byte_size(Shape(dims), dtype));
  tensor.dims = std::move(dims);
  std::mt19937 random(seed);
  for (std::uint8_t& byte : tensor.bytes) byte = static_cast<std::uint8_t>(random());
  return tensor;
}

// A state at `step` with one tensor of every dtype, a scalar, two empty tensors and metadata; tensor bytes
// depend on the step so checkpoints of different steps differ.
inline CheckpointState sample_state(std::int64_t step) {
  const auto seed = static_cast<std::uint32_t>(step * 31 + 7);
  CheckpointState state;
  state.step = step;
  state.epoch = step / 100;
  state.batch_in_epoch = step % 100;
  state.rng_seed = 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(step);
  state.tensors["dense/kernel"] = random_tensor(DType::f32, {16, 8}, seed);
  state.tensors["dense/bias"] = random_tensor(DType::f32, {8}, seed + 1);
  state.tensors["adam/m/half"] = random_tensor(DType::f16, {3, 5}, seed + 2);
  state.tensors["adam/v/bf16"] = random_tensor(DType::bf16, {2, 2, 2}, seed + 3);
  state.tensors["f64"] = random_tensor(DType::f64, {7}, seed + 4);
  state.tensors["i32"] = random_tensor(DType::i32, {1, 9}, seed + 5);
  state.tensors["optimizer/iterations"] = random_tensor(DType::i64, {}, seed + 6);  // scalar
  state.tensors["u8"] = random_tensor(DType::u8, {13}, seed + 7);
  state.tensors["mask"] = random_tensor(DType::boolean, {4}, seed + 8);
  state.tensors["empty/u8"] = random_tensor(DType::u8, {0}, seed + 9);
  state.tensors["empty/f32"] = random_tensor(DType::f32, {3, 0, 2}, seed + 10);
  state.metadata["model"] = "Sequential[Dense(512,relu),Dense(10,softmax)]";
  state.metadata["optimizer"] = "adam";
  state.metadata["empty"] = "";
  state.metadata["utf8"] = "\xce\xbb=0.001";
  return state;
}

// The whole file (empty when it cannot be read). Sized reads: istreambuf_iterator trips GCC 12's
// -Wnull-dereference.
inline std::vector<std::uint8_t> read_bytes(const std::filesystem::path& file) {
  std::error_code error;
  const auto size = std::filesystem::file_size(file, error);
  if (error) return {};
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  std::ifstream in(file, std::ios::binary);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  return bytes;
}

inline void write_bytes(const std::filesystem::path& file, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_text(const std::filesystem::path& file) {
  const std::vector<std::uint8_t> bytes = read_bytes(file);
  return {bytes.begin(), bytes.end()};
}

}  // namespace tp::train::testing
