// SPDX-License-Identifier: Apache-2.0
#include "data/idx_input.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <system_error>

#include "tensorpool/core/error.hpp"

namespace tp::data::detail {

namespace {

constexpr std::size_t kInputChunkBytes = std::size_t{256} << 10;
// zlib counts in uInt: longer reads are served in pieces of at most this many bytes.
constexpr std::size_t kMaxZlibChunk = std::size_t{1} << 30;

}  // namespace

// Invariant: `stream` is initialised for gzip decoding (inflateInit2) for the life of this object;
// member_ended is true between the end of one gzip member and the start of the next (or the end of file).
struct IdxInput::Inflater {
  z_stream stream{};
  bool member_ended = false;
  int members = 1;

  Inflater() {
    const int status = inflateInit2(&stream, 15 + 16);  // 15-bit window, gzip wrapper only
    if (status == Z_MEM_ERROR) throw std::bad_alloc();
    if (status != Z_OK) TP_THROW(DataError, "data", "zlib inflateInit2 failed (status ", status, ")");
  }
  ~Inflater() { inflateEnd(&stream); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
};

IdxInput::IdxInput(const std::filesystem::path& path) : name_(path.string()), file_(nullptr, &std::fclose) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    TP_THROW(DataError, "data", name_, ": is a directory, not an IDX file");
  }
  file_.reset(std::fopen(path.c_str(), "rb"));
  if (file_ == nullptr) {
    const int error_number = errno;
    TP_THROW(DataError, "data", name_, ": cannot open: ", std::strerror(error_number));
  }
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  file_bytes_ = error ? 0 : static_cast<std::uint64_t>(size);

  unsigned char magic[2] = {0, 0};
  const std::size_t peeked = std::fread(magic, 1, sizeof magic, file_.get());
  gzip_ = peeked == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (std::fseek(file_.get(), 0, SEEK_SET) != 0) {
    const int error_number = errno;
    TP_THROW(DataError, "data", name_, ": cannot rewind after reading the magic: ", std::strerror(error_number));
  }
  if (gzip_) {
    inflater_ = std::make_unique<Inflater>();
    input_.resize(kInputChunkBytes);
  }
}

IdxInput::~IdxInput() = default;

std::size_t IdxInput::read(void* destination, std::size_t bytes) {
  auto* out = static_cast<unsigned char*>(destination);
  std::size_t done = 0;
  while (done < bytes) {
    const std::size_t piece = std::min(bytes - done, kMaxZlibChunk);
    const std::size_t got = gzip_ ? read_gzip(out + done, piece) : read_raw(out + done, piece);
    done += got;
    if (got < piece) break;
  }
  return done;
}

std::uint64_t IdxInput::drain() {
  std::vector<unsigned char> scratch(std::size_t{64} << 10);
  std::uint64_t total = 0;
  for (;;) {
    const std::size_t got = read(scratch.data(), scratch.size());
    total += got;
    if (got < scratch.size()) return total;
  }
}

std::size_t IdxInput::read_raw(void* destination, std::size_t bytes) {
  const std::size_t got = std::fread(destination, 1, bytes, file_.get());
  if (got < bytes && std::ferror(file_.get()) != 0) {
    TP_THROW(DataError, "data", name_, ": read error: ", std::strerror(errno));
  }
  return got;
}

bool IdxInput::refill() {
  z_stream& stream = inflater_->stream;
  const std::size_t got = std::fread(input_.data(), 1, input_.size(), file_.get());
  if (got == 0) {
    if (std::ferror(file_.get()) != 0) TP_THROW(DataError, "data", name_, ": read error: ", std::strerror(errno));
    return false;
  }
  stream.next_in = input_.data();
  stream.avail_in = static_cast<uInt>(got);
  return true;
}

std::size_t IdxInput::read_gzip(void* destination, std::size_t bytes) {
  z_stream& stream = inflater_->stream;
  stream.next_out = static_cast<Bytef*>(destination);
  stream.avail_out = static_cast<uInt>(bytes);
  while (stream.avail_out > 0) {
    if (stream.avail_in == 0 && !refill()) {
      // The file is over: clean only when the last member reached its trailer.
      if (!inflater_->member_ended) truncated_ = true;
      break;
    }
    if (inflater_->member_ended) {
      // Bytes follow a complete member: gzip allows concatenated members; anything else fails below.
      inflateReset(&stream);
      inflater_->member_ended = false;
      ++inflater_->members;
    }
    const int status = inflate(&stream, Z_NO_FLUSH);
    if (status == Z_STREAM_END) {
      inflater_->member_ended = true;
    } else if (status == Z_MEM_ERROR) {
      throw std::bad_alloc();
    } else if (status != Z_OK && status != Z_BUF_ERROR) {
      const char* why = stream.msg != nullptr ? stream.msg : "inflate failed";
      if (inflater_->members > 1) {
        TP_THROW(DataError, "data", name_, ": corrupt gzip stream: ", why, " in the data after gzip member ",
                 inflater_->members - 1, " (trailing bytes that are not a gzip member)");
      }
      const bool checksum = std::strcmp(why, "incorrect data check") == 0;
      TP_THROW(DataError, "data", name_, ": corrupt gzip stream: ", why,
               checksum ? " (CRC-32 of the inflated data does not match the gzip trailer)" : "");
    }
  }
  return bytes - stream.avail_out;
}

}  // namespace tp::data::detail
