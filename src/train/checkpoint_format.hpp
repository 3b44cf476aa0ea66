// SPDX-License-Identifier: Apache-2.0
#pragma once
// The checkpoint file format (docs/checkpoints.md), separate from the files and directories around it:
// encode_checkpoint streams a CheckpointState as bytes, decode_checkpoint checks and parses them.
//
// Layout, all integers little-endian:
//   magic "TPCKPT01" | u32 version | u32 flags (0) | u64 file_length | i64 step | i64 epoch
//   | i64 batch_in_epoch | u64 rng_seed | u32 metadata_count | u32 tensor_count
//   | metadata_count x (string key, string value)
//   | tensor_count x (string name, u8 dtype code, u32 rank, rank x i64 dim, u64 byte_length, bytes)
//   | u32 CRC-32 (zlib polynomial) of every byte before it
// where a string is u32 length + that many bytes. Tensor bytes are the host's (little-endian) element order.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "tensorpool/train/checkpoint.hpp"

namespace tp::train::detail {

inline constexpr std::size_t kMagicBytes = 8;
inline constexpr std::size_t kFixedHeaderBytes = 64;  // magic through tensor_count
inline constexpr std::size_t kCrcBytes = 4;
inline constexpr std::size_t kVersionOffset = 8;
inline constexpr std::size_t kFileLengthOffset = 16;

// Receives the encoded bytes in file order.
using ByteSink = std::function<void(const std::uint8_t* data, std::size_t size)>;

// Throws tp::InvalidArgument naming the problem when `state` cannot be saved: negative step, empty tensor
// name, a string over 4 GiB, bytes that do not match a tensor's dtype and dims.
void validate_checkpoint(const CheckpointState& state);

// Bytes encode_checkpoint will produce for `state`.
std::uint64_t encoded_size(const CheckpointState& state);

// Streams `state` to `sink`, CRC trailer included, after validate_checkpoint (nothing is emitted when that
// throws).
void encode_checkpoint(const CheckpointState& state, const ByteSink& sink);

// Parses a whole file's bytes. Checks, in this order, so the error names the first problem: length of the
// fixed header, magic, version, file_length against the actual size (truncation or trailing bytes), CRC,
// then the structure (string and tensor lengths in bounds, known dtype codes, non-negative dims,
// byte_length = elements x dtype size, no duplicate names, nothing left over). Throws tp::DataError whose
// message starts with `file_label`.
CheckpointState decode_checkpoint(std::span<const std::uint8_t> bytes, const std::string& file_label);

// CRC-32 (zlib) of `bytes`, continuing from `crc` (0 to start).
std::uint32_t crc32_of(std::span<const std::uint8_t> bytes, std::uint32_t crc = 0);

}  // namespace tp::train::detail
