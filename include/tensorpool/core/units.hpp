// SPDX-License-Identifier: Apache-2.0
#pragma once
// Byte-size helpers shared by configuration parsing, reports and the CLI.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tp {

inline constexpr std::size_t kKiB = std::size_t{1} << 10;
inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline constexpr std::size_t kGiB = std::size_t{1} << 30;

// "1.50 GiB", "256 B": binary units, two decimals above bytes.
[[nodiscard]] std::string format_bytes(std::size_t bytes);

// Parses "1073741824", "512MiB", "1.5GiB", "64KB" (KB/MB/GB are read as binary units like KiB/MiB/GiB, as
// TensorFlow and PyTorch users write them). Throws tp::InvalidArgument naming `what` and the text on
// anything else: empty, negative, unknown suffix, trailing garbage, overflow.
[[nodiscard]] std::size_t parse_bytes(std::string_view text, std::string_view what);

}  // namespace tp
