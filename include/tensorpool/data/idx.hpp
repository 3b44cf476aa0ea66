// SPDX-License-Identifier: Apache-2.0
#pragma once
// IDX files: the array format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/), raw or
// gzip-compressed.
//
// Layout: a 4-byte magic 0x00 0x00 <type> <ndims>, then ndims big-endian 32-bit dimensions, then the
// elements in row-major order, multi-byte ones big-endian. Types: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32,
// 0x0D f32, 0x0E f64.
//
// read_idx accepts a file only when everything agrees: the magic's two zero bytes, a known type, 1..4
// dimensions each in 1..2^31-1, a total size that fits in memory arithmetic (overflow-checked), exactly the
// bytes the header announces (neither fewer: "truncated", nor more: "trailing bytes"), and for a gzip file a
// stream that inflates cleanly to its end with a matching CRC and length. Every problem raises tp::DataError
// whose message starts with the file name and says what is wrong, e.g.
//   "t10k-labels-idx1-ubyte.gz: truncated: header says 10000 labels, file holds 9998".
// A file is read as gzip when it starts with the gzip magic (1f 8b), whatever its name.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/core/error.hpp"

namespace tp::data {

// The element types of IDX; the enumerator values are the type bytes of the magic.
enum class IdxType : std::uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };

// 1, 1, 2, 4, 4, 8.
[[nodiscard]] std::size_t size_of(IdxType type) noexcept;
// "u8", "i8", "i16", "i32", "f32", "f64".
std::string_view to_string(IdxType type) noexcept;
// The IdxType whose type byte is `code`; nullopt for any other byte.
[[nodiscard]] std::optional<IdxType> idx_type_from_code(std::uint8_t code) noexcept;

template <typename T>
constexpr IdxType idx_type_of() = delete;
template <>
constexpr IdxType idx_type_of<std::uint8_t>() {
  return IdxType::u8;
}
template <>
constexpr IdxType idx_type_of<std::int8_t>() {
  return IdxType::i8;
}
template <>
constexpr IdxType idx_type_of<std::int16_t>() {
  return IdxType::i16;
}
template <>
constexpr IdxType idx_type_of<std::int32_t>() {
  return IdxType::i32;
}
template <>
constexpr IdxType idx_type_of<float>() {
  return IdxType::f32;
}
template <>
constexpr IdxType idx_type_of<double>() {
  return IdxType::f64;
}

// A host array read from (or to be written to) an IDX file.
// Invariant (checked by validate()): 1 <= dims.size() <= 4, every dim > 0, and
// bytes.size() == product(dims) x size_of(type); the bytes hold the elements in host byte order.
struct IdxArray {
  IdxType type = IdxType::u8;
  std::vector<std::int64_t> dims{};
  std::vector<std::uint8_t> bytes{};

  // An array of `values` (copied) with `dims`; throws tp::InvalidArgument when they do not agree.
  // dims is moved into the result below: clang-tidy 14 misses a move inside an initializer that depends on T.
  template <typename T>
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  static IdxArray of(std::vector<std::int64_t> dims, std::span<const T> values) {
    IdxArray array{.type = idx_type_of<T>(), .dims = std::move(dims), .bytes = {}};
    array.bytes.resize(values.size_bytes());
    if (!values.empty()) std::memcpy(array.bytes.data(), values.data(), values.size_bytes());
    array.validate();
    return array;
  }

  [[nodiscard]] std::int64_t num_elements() const noexcept;
  // The elements as T; throws tp::InvalidArgument naming both types when T is not the array's type.
  template <typename T>
  std::span<const T> values() const {
    check_type(idx_type_of<T>());
    return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
  // Throws tp::InvalidArgument naming the dims and byte count when the invariant above does not hold.
  void validate() const;

 private:
  void check_type(IdxType requested) const;
};

// What the caller expects of a file, to phrase errors in its terms ("bad magic 0x00000801 for an image file")
// and to refuse a well-formed file of the wrong kind. Unset fields are not checked.
struct IdxExpectation {
  std::optional<IdxType> type{};
  std::optional<std::size_t> ndims{};
  std::string file_kind = "an IDX file";  // with its article: "an image file", "a label file"
  std::string items = "items";            // what the first dimension counts: "images", "labels"
};

// Reads the whole file. Throws tp::DataError naming the file (as given) for a missing or unreadable file and
// for every format problem listed at the top of this header.
[[nodiscard]] IdxArray read_idx(const std::filesystem::path& path, const IdxExpectation& expect = {});

enum class IdxCompression { none, gzip };

// Writes `array` (validated first: tp::InvalidArgument) as an IDX file, gzip-compressed when asked.
// Throws tp::DataError naming the file when it cannot be created or written.
void write_idx(const std::filesystem::path& path, const IdxArray& array,
               IdxCompression compression = IdxCompression::none);

}  // namespace tp::data
