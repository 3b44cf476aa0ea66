// SPDX-License-Identifier: Apache-2.0
// read_idx: header checks first (magic, type, dimensions, total size), then the payload, then whatever
// follows it. Each check raises tp::DataError "<file>: <what is wrong>" (see idx.hpp).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include "data/idx_format.hpp"
#include "data/idx_input.hpp"
#include "tensorpool/data/idx.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp::data {

namespace {

using detail::dims_text;
using detail::IdxInput;

std::string hex32(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08X", value);
  return text;
}

std::string hex8(unsigned value) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", value);
  return text;
}

std::string plural(std::size_t count, const char* one, const char* many) {
  return std::to_string(count) + " " + (count == 1 ? one : many);
}

std::string known_types() { return "0x08 (u8), 0x09 (i8), 0x0B (i16), 0x0C (i32), 0x0D (f32), 0x0E (f64)"; }

struct Header {
  IdxType type = IdxType::u8;
  std::vector<std::int64_t> dims{};
  std::size_t header_bytes = 0;
  std::size_t payload_bytes = 0;
};

// The magic: two zero bytes, a known type, 1..4 dimensions, and what the caller expects.
Header check_magic(IdxInput& input, const IdxExpectation& expect) {
  const std::string& name = input.name();
  unsigned char magic[detail::kIdxMagicBytes] = {};
  const std::size_t got = input.read(magic, sizeof magic);
  if (got < sizeof magic) {
    TP_THROW(DataError, "data", name, ": truncated: ", plural(got, "byte", "bytes"),
             ", too short for the 4-byte IDX magic");
  }
  const std::uint32_t value = detail::load_big_endian_u32(magic);
  if (magic[0] != 0 || magic[1] != 0) {
    TP_THROW(DataError, "data", name, ": bad magic ", hex32(value), " for ", expect.file_kind,
             ": an IDX magic starts with two zero bytes (0x0000TTNN: type TT, NN dimensions); is this an IDX file?");
  }
  const std::optional<IdxType> type = idx_type_from_code(magic[2]);
  if (!type) {
    TP_THROW(DataError, "data", name, ": bad element type ", hex8(magic[2]), " in magic ", hex32(value),
             ": IDX types are ", known_types());
  }
  const std::size_t ndims = magic[3];
  if (ndims == 0 || ndims > detail::kIdxMaxDims) {
    TP_THROW(DataError, "data", name, ": bad magic ", hex32(value), ": ", plural(ndims, "dimension", "dimensions"),
             "; IDX files have 1 to 4");
  }
  const bool wrong_type = expect.type && *expect.type != *type;
  const bool wrong_rank = expect.ndims && *expect.ndims != ndims;
  if (wrong_type || wrong_rank) {
    const IdxType want_type = expect.type.value_or(*type);
    const std::size_t want_rank = expect.ndims.value_or(ndims);
    const std::uint32_t want =
        (std::uint32_t{static_cast<std::uint8_t>(want_type)} << 8) | static_cast<std::uint32_t>(want_rank);
    TP_THROW(DataError, "data", name, ": bad magic ", hex32(value), " for ", expect.file_kind, ": expected ",
             hex32(want), " (", to_string(want_type), ", ", plural(want_rank, "dimension", "dimensions"),
             "), the file holds ", to_string(*type), " with ", plural(ndims, "dimension", "dimensions"));
  }
  return Header{
      .type = *type, .dims = std::vector<std::int64_t>(ndims), .header_bytes = 4 + 4 * ndims, .payload_bytes = 0};
}

// The dimensions: each in 1..2^31-1; the total byte count overflow-checked and below kMaxAllocationBytes.
void check_dims(IdxInput& input, Header& header) {
  const std::string& name = input.name();
  const std::size_t ndims = header.dims.size();
  unsigned char raw[4 * detail::kIdxMaxDims] = {};
  const std::size_t got = input.read(raw, 4 * ndims);
  if (got < 4 * ndims) {
    TP_THROW(DataError, "data", name, ": truncated: the magic announces ", plural(ndims, "dimension", "dimensions"),
             " (", 4 * ndims, " bytes) but the file ends ", got, " bytes into them");
  }
  std::size_t elements = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < ndims; ++i) {
    const std::uint32_t dim = detail::load_big_endian_u32(raw + 4 * i);
    if (dim == 0) {
      TP_THROW(DataError, "data", name, ": dimension ", i, " of ", ndims, " is zero; every IDX dimension must be > 0");
    }
    if (dim > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max())) {
      TP_THROW(DataError, "data", name, ": dimension ", i, " is ", dim, ", above the IDX limit 2147483647");
    }
    header.dims[i] = dim;
    overflow = overflow || __builtin_mul_overflow(elements, std::size_t{dim}, &elements);
  }
  std::size_t bytes = 0;
  overflow = overflow || __builtin_mul_overflow(elements, size_of(header.type), &bytes);
  if (overflow || bytes > memory::kMaxAllocationBytes) {
    TP_THROW(DataError, "data", name, ": dimensions ", dims_text(header.dims), " of ", to_string(header.type),
             " describe more bytes than any array can hold (the size overflows)");
  }
  header.payload_bytes = bytes;
}

// Reads the payload in growing pieces, so a header that lies about a huge size costs no more memory than
// the data really present.
std::vector<std::uint8_t> read_payload(IdxInput& input, std::size_t expected) {
  std::vector<std::uint8_t> bytes;
  const std::uint64_t bound = input.gzip() ? input.file_bytes() * 1032 + 1024 : input.file_bytes();
  bytes.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(expected, bound)));
  while (bytes.size() < expected) {
    const std::size_t piece =
        std::min(expected - bytes.size(), std::max(bytes.capacity() - bytes.size(), std::size_t{1} << 20));
    const std::size_t old_size = bytes.size();
    bytes.resize(old_size + piece);
    const std::size_t got = input.read(bytes.data() + old_size, piece);
    bytes.resize(old_size + got);
    if (got < piece) break;
  }
  return bytes;
}

[[noreturn]] void throw_truncated(const IdxInput& input, const Header& header, const IdxExpectation& expect,
                                  std::size_t got) {
  const std::size_t item_bytes = header.payload_bytes / static_cast<std::size_t>(header.dims[0]);
  const std::size_t whole = got / item_bytes;
  const std::size_t partial = got % item_bytes;
  std::ostringstream text;
  text << "truncated: header says " << header.dims[0] << " " << expect.items << ", file holds " << whole;
  if (partial != 0) text << " and " << partial << " of the " << item_bytes << " bytes of the next";
  text << " (" << header.payload_bytes << " data bytes expected after the " << header.header_bytes << "-byte header, "
       << got << " present)";
  if (input.truncated()) text << "; the gzip stream is cut short too (it ends before its trailer)";
  TP_THROW(DataError, "data", input.name(), ": ", text.str());
}

}  // namespace

IdxArray read_idx(const std::filesystem::path& path, const IdxExpectation& expect) {
  IdxInput input(path);
  Header header = check_magic(input, expect);
  check_dims(input, header);
  std::vector<std::uint8_t> bytes = read_payload(input, header.payload_bytes);
  if (bytes.size() < header.payload_bytes) throw_truncated(input, header, expect, bytes.size());
  const std::uint64_t trailing = input.drain();  // for gzip, this also checks the CRC and length
  if (trailing != 0) {
    TP_THROW(DataError, "data", input.name(), ": trailing bytes: header says ", header.dims[0], " ", expect.items, " ",
             dims_text(header.dims), " of ", to_string(header.type), " (", header.payload_bytes,
             " data bytes after the ", header.header_bytes, "-byte header), but ", trailing, " more bytes follow them");
  }
  if (input.truncated()) {
    TP_THROW(DataError, "data", input.name(),
             ": truncated gzip stream: the file ends before the gzip trailer (CRC-32 and length), so the data "
             "cannot be verified");
  }
  detail::swap_big_endian_in_place(bytes.data(), bytes.size() / size_of(header.type), size_of(header.type));
  return IdxArray{.type = header.type, .dims = std::move(header.dims), .bytes = std::move(bytes)};
}

}  // namespace tp::data
