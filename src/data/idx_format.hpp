// SPDX-License-Identifier: Apache-2.0
#pragma once
// Byte-level pieces of the IDX format shared by the reader and the writer.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tp::data::detail {

inline constexpr std::size_t kIdxMagicBytes = 4;
inline constexpr std::size_t kIdxMaxDims = 4;

inline std::uint32_t load_big_endian_u32(const unsigned char* bytes) noexcept {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) | (std::uint32_t{bytes[2]} << 8) |
         std::uint32_t{bytes[3]};
}

inline void store_big_endian_u32(std::uint32_t value, unsigned char* bytes) noexcept {
  bytes[0] = static_cast<unsigned char>(value >> 24);
  bytes[1] = static_cast<unsigned char>(value >> 16);
  bytes[2] = static_cast<unsigned char>(value >> 8);
  bytes[3] = static_cast<unsigned char>(value);
}

// Converts `count` elements of `element_size` bytes between big-endian (the file) and host order, in place.
// A no-op on a big-endian host and for 1-byte elements; the conversion is its own inverse.
inline void swap_big_endian_in_place(unsigned char* data, std::size_t count, std::size_t element_size) noexcept {
  if constexpr (std::endian::native == std::endian::big) return;
  switch (element_size) {
    case 2:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint16_t value;
        std::memcpy(&value, data + 2 * i, 2);
        value = __builtin_bswap16(value);
        std::memcpy(data + 2 * i, &value, 2);
      }
      break;
    case 4:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint32_t value;
        std::memcpy(&value, data + 4 * i, 4);
        value = __builtin_bswap32(value);
        std::memcpy(data + 4 * i, &value, 4);
      }
      break;
    case 8:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint64_t value;
        std::memcpy(&value, data + 8 * i, 8);
        value = __builtin_bswap64(value);
        std::memcpy(data + 8 * i, &value, 8);
      }
      break;
    default: break;
  }
}

// "[60000,28,28]".
template <typename Integer>
std::string dims_text(const std::vector<Integer>& dims) {
  std::string text = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i == 0 ? "" : ",") + std::to_string(dims[i]);
  return text + "]";
}

}  // namespace tp::data::detail
