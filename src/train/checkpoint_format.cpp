// SPDX-License-Identifier: Apache-2.0
#include "checkpoint_format.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "tensorpool/core/error.hpp"

namespace tp::train::detail {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoint tensor bytes are stored in host order, which the format defines as little-endian");
static_assert(sizeof(kCheckpointMagic) == kMagicBytes + 1);

// On-disk dtype codes: fixed forever, independent of the DType enumerators' order. 0 is never valid.
constexpr std::array<std::pair<DType, std::uint8_t>, 8> kDTypeCodes{{
    {DType::f32, 1},
    {DType::f16, 2},
    {DType::bf16, 3},
    {DType::f64, 4},
    {DType::i32, 5},
    {DType::i64, 6},
    {DType::u8, 7},
    {DType::boolean, 8},
}};

std::uint8_t dtype_code(DType dtype) {
  for (const auto& [candidate, code] : kDTypeCodes) {
    if (candidate == dtype) return code;
  }
  TP_THROW(InvalidArgument, "train", "checkpoint: dtype ", static_cast<int>(dtype), " has no on-disk code");
}

bool dtype_from_code(std::uint8_t code, DType& dtype) {
  for (const auto& [candidate, candidate_code] : kDTypeCodes) {
    if (candidate_code == code) {
      dtype = candidate;
      return true;
    }
  }
  return false;
}

// Emits little-endian integers and byte runs to the sink, keeping the running CRC of all of them.
class Encoder {
 public:
  explicit Encoder(const ByteSink& sink) : sink_(sink) {}

  template <typename Integer>
  void integer(Integer value) {
    std::array<std::uint8_t, sizeof(Integer)> bytes{};
    auto bits = static_cast<std::make_unsigned_t<Integer>>(value);
    for (std::uint8_t& byte : bytes) {
      byte = static_cast<std::uint8_t>(bits & 0xFFu);
      bits = static_cast<decltype(bits)>(bits >> 8);
    }
    raw(bytes.data(), bytes.size());
  }
  void string(const std::string& text) {
    integer(static_cast<std::uint32_t>(text.size()));
    raw(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
  }
  void raw(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return;
    crc_ = crc32_of({data, size}, crc_);
    sink_(data, size);
  }
  void finish() {
    const std::uint32_t crc = crc_;
    integer(crc);  // the trailer itself is outside the checksum: crc_ changes after this, unused
  }

 private:
  const ByteSink& sink_;
  std::uint32_t crc_ = 0;
};

// Reads little-endian fields from the verified bytes; any read past the end is a malformed file.
class Decoder {
 public:
  // Reads `bytes` from `start` on; offsets in messages count from the start of `bytes` (the file).
  Decoder(std::span<const std::uint8_t> bytes, const std::string& label, std::size_t start = 0)
      : bytes_(bytes), label_(label), offset_(start) {}

  template <typename Integer>
  Integer integer(const char* field) {
    need(sizeof(Integer), field);
    std::make_unsigned_t<Integer> bits = 0;
    for (std::size_t i = sizeof(Integer); i-- > 0;) {
      bits = static_cast<decltype(bits)>((bits << 8) | bytes_[offset_ + i]);
    }
    offset_ += sizeof(Integer);
    return static_cast<Integer>(bits);
  }
  std::string string(const char* field) {
    const auto size = integer<std::uint32_t>(field);
    need(size, field);
    std::string text(reinterpret_cast<const char*>(bytes_.data() + offset_), size);
    offset_ += size;
    return text;
  }
  std::span<const std::uint8_t> raw(std::uint64_t size, const char* field) {
    need(size, field);
    auto run = bytes_.subspan(offset_, static_cast<std::size_t>(size));
    offset_ += static_cast<std::size_t>(size);
    return run;
  }
  std::size_t offset() const noexcept { return offset_; }
  std::size_t remaining() const noexcept { return bytes_.size() - offset_; }

 private:
  void need(std::uint64_t size, const char* field) const {
    if (size > remaining()) {
      TP_THROW(DataError, "train", label_, ": malformed checkpoint: ", field, " at offset ", offset_, " needs ", size,
               " bytes but only ", remaining(), " remain");
    }
  }

  std::span<const std::uint8_t> bytes_;  // invariant: offset_ <= bytes_.size()
  const std::string& label_;
  std::size_t offset_ = 0;
};

void check_string_length(const std::string& text, std::string_view what) {
  if (text.size() > std::numeric_limits<std::uint32_t>::max()) {
    TP_THROW(InvalidArgument, "train", "checkpoint: ", what, " of ", text.size(), " bytes is over the 4 GiB limit");
  }
}

}  // namespace

void validate_checkpoint(const CheckpointState& state) {
  if (state.step < 0) TP_THROW(InvalidArgument, "train", "checkpoint: step ", state.step, " is negative");
  if (state.metadata.size() > std::numeric_limits<std::uint32_t>::max() ||
      state.tensors.size() > std::numeric_limits<std::uint32_t>::max()) {
    TP_THROW(InvalidArgument, "train", "checkpoint: too many metadata entries or tensors");
  }
  for (const auto& [key, value] : state.metadata) {
    check_string_length(key, "a metadata key");
    check_string_length(value, "metadata value '" + key + "'");
  }
  for (const auto& [name, tensor] : state.tensors) {
    if (name.empty()) TP_THROW(InvalidArgument, "train", "checkpoint: a tensor has an empty name");
    check_string_length(name, "a tensor name");
    check_host_tensor(tensor, ("checkpoint tensor '" + name + "'").c_str());
  }
}

std::uint32_t crc32_of(std::span<const std::uint8_t> bytes, std::uint32_t crc) {
  return static_cast<std::uint32_t>(::crc32_z(crc, bytes.data(), bytes.size()));
}

std::uint64_t encoded_size(const CheckpointState& state) {
  std::uint64_t size = kFixedHeaderBytes + kCrcBytes;
  for (const auto& [key, value] : state.metadata) size += 8 + key.size() + value.size();
  for (const auto& [name, tensor] : state.tensors) {
    size += 4 + name.size() + 1 + 4 + 8 * tensor.dims.size() + 8 + tensor.bytes.size();
  }
  return size;
}

void encode_checkpoint(const CheckpointState& state, const ByteSink& sink) {
  validate_checkpoint(state);
  Encoder out(sink);
  out.raw(reinterpret_cast<const std::uint8_t*>(kCheckpointMagic), kMagicBytes);
  out.integer(kCheckpointVersion);
  out.integer(std::uint32_t{0});  // flags, reserved
  out.integer(encoded_size(state));
  out.integer(state.step);
  out.integer(state.epoch);
  out.integer(state.batch_in_epoch);
  out.integer(state.rng_seed);
  out.integer(static_cast<std::uint32_t>(state.metadata.size()));
  out.integer(static_cast<std::uint32_t>(state.tensors.size()));
  for (const auto& [key, value] : state.metadata) {
    out.string(key);
    out.string(value);
  }
  for (const auto& [name, tensor] : state.tensors) {
    out.string(name);
    out.integer(dtype_code(tensor.dtype));
    out.integer(static_cast<std::uint32_t>(tensor.dims.size()));
    for (std::int64_t dim : tensor.dims) out.integer(dim);
    out.integer(static_cast<std::uint64_t>(tensor.bytes.size()));
    out.raw(tensor.bytes.data(), tensor.bytes.size());
  }
  out.finish();
}

namespace {

// Magic, version, length and CRC: the checks that decide whether the bytes are a whole, intact file.
void check_envelope(std::span<const std::uint8_t> bytes, const std::string& label) {
  if (bytes.size() < kFixedHeaderBytes + kCrcBytes) {
    TP_THROW(DataError, "train", label, ": truncated checkpoint: ", bytes.size(), " bytes, shorter than the ",
             kFixedHeaderBytes + kCrcBytes, "-byte header and CRC");
  }
  if (std::memcmp(bytes.data(), kCheckpointMagic, kMagicBytes) != 0) {
    TP_THROW(DataError, "train", label, ": not a tensorpool checkpoint (bad magic; expected \"", kCheckpointMagic,
             "\")");
  }
  Decoder header(bytes, label, kVersionOffset);
  const auto version = header.integer<std::uint32_t>("version");
  if (version != kCheckpointVersion) {
    TP_THROW(DataError, "train", label, ": checkpoint format version ", version, " is not supported (this build reads ",
             "version ", kCheckpointVersion, ")");
  }
  header.integer<std::uint32_t>("flags");
  const auto file_length = header.integer<std::uint64_t>("file_length");
  if (file_length > bytes.size()) {
    TP_THROW(DataError, "train", label, ": truncated checkpoint: the header says ", file_length,
             " bytes but the file has ", bytes.size());
  }
  if (file_length < bytes.size()) {
    TP_THROW(DataError, "train", label, ": corrupted checkpoint: the header says ", file_length,
             " bytes but the file has ", bytes.size(), " (trailing bytes)");
  }
  const std::size_t body = bytes.size() - kCrcBytes;
  const auto stored = Decoder(bytes, label, body).integer<std::uint32_t>("crc");
  const std::uint32_t computed = crc32_of(bytes.first(body));
  if (stored != computed) {
    TP_THROW(DataError, "train", label, ": corrupted checkpoint: CRC-32 mismatch (stored ",
             fmt::format("{:#010x}", stored), ", computed ", fmt::format("{:#010x}", computed), ")");
  }
}

HostTensor decode_tensor(Decoder& in, const std::string& name, const std::string& label) {
  HostTensor tensor;
  const auto code = in.integer<std::uint8_t>("dtype");
  if (!dtype_from_code(code, tensor.dtype)) {
    TP_THROW(DataError, "train", label, ": malformed checkpoint: tensor '", name, "' has unknown dtype code ",
             static_cast<int>(code));
  }
  const auto rank = in.integer<std::uint32_t>("rank");
  if (rank > in.remaining() / 8) {
    TP_THROW(DataError, "train", label, ": malformed checkpoint: tensor '", name, "' has rank ", rank,
             ", more dims than bytes left");
  }
  std::uint64_t elements = 1;
  bool overflow = false;
  for (std::uint32_t i = 0; i < rank; ++i) {
    const auto dim = in.integer<std::int64_t>("dim");
    if (dim < 0) {
      TP_THROW(DataError, "train", label, ": malformed checkpoint: tensor '", name, "' has negative dim ", dim);
    }
    tensor.dims.push_back(dim);
    const auto extent = static_cast<std::uint64_t>(dim);
    if (extent != 0 && elements > std::numeric_limits<std::uint64_t>::max() / extent) overflow = true;
    elements *= extent;
  }
  const std::uint64_t element_size = size_of(tensor.dtype);
  if (elements == 0) overflow = false;  // any zero dim makes the tensor empty whatever the others are
  const auto byte_length = in.integer<std::uint64_t>("byte_length");
  if (overflow || elements > std::numeric_limits<std::uint64_t>::max() / element_size ||
      byte_length != elements * element_size) {
    TP_THROW(DataError, "train", label, ": malformed checkpoint: tensor '", name, "' (", name_of(tensor.dtype), ", ",
             rank, " dims) declares ", byte_length, " bytes, which does not match its dims");
  }
  const auto bytes = in.raw(byte_length, "tensor bytes");
  tensor.bytes.assign(bytes.begin(), bytes.end());
  return tensor;
}

}  // namespace

CheckpointState decode_checkpoint(std::span<const std::uint8_t> bytes, const std::string& file_label) {
  check_envelope(bytes, file_label);
  // The body without the CRC trailer, read from just after file_length.
  Decoder in(bytes.first(bytes.size() - kCrcBytes), file_label, kFileLengthOffset + 8);
  CheckpointState state;
  state.step = in.integer<std::int64_t>("step");
  state.epoch = in.integer<std::int64_t>("epoch");
  state.batch_in_epoch = in.integer<std::int64_t>("batch_in_epoch");
  state.rng_seed = in.integer<std::uint64_t>("rng_seed");
  const auto metadata_count = in.integer<std::uint32_t>("metadata_count");
  const auto tensor_count = in.integer<std::uint32_t>("tensor_count");
  for (std::uint32_t i = 0; i < metadata_count; ++i) {
    std::string key = in.string("metadata key");
    std::string value = in.string("metadata value");
    if (!state.metadata.emplace(std::move(key), std::move(value)).second) {
      TP_THROW(DataError, "train", file_label, ": malformed checkpoint: duplicate metadata key");
    }
  }
  for (std::uint32_t i = 0; i < tensor_count; ++i) {
    std::string name = in.string("tensor name");
    if (state.tensors.contains(name)) {
      TP_THROW(DataError, "train", file_label, ": malformed checkpoint: duplicate tensor '", name, "'");
    }
    HostTensor tensor = decode_tensor(in, name, file_label);
    state.tensors.emplace(std::move(name), std::move(tensor));
  }
  if (in.remaining() != 0) {
    TP_THROW(DataError, "train", file_label, ": malformed checkpoint: ", in.remaining(),
             " unexplained bytes between the last tensor and the CRC");
  }
  return state;
}

}  // namespace tp::train::detail
