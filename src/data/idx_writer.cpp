// SPDX-License-Identifier: Apache-2.0
// write_idx: header, then the elements converted to big-endian in 1 MiB pieces (so writing never doubles
// the array's memory), through stdio or zlib's gz* functions.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>

#include "data/idx_format.hpp"
#include "tensorpool/data/idx.hpp"

namespace tp::data {

namespace {

constexpr std::size_t kPieceBytes = std::size_t{1} << 20;

using Sink = std::function<bool(const unsigned char*, std::size_t)>;

void write_all(const IdxArray& array, const Sink& sink, const std::string& name) {
  std::vector<unsigned char> header(detail::kIdxMagicBytes + 4 * array.dims.size());
  header[2] = static_cast<unsigned char>(array.type);
  header[3] = static_cast<unsigned char>(array.dims.size());
  for (std::size_t i = 0; i < array.dims.size(); ++i) {
    detail::store_big_endian_u32(static_cast<std::uint32_t>(array.dims[i]), header.data() + 4 + 4 * i);
  }
  if (!sink(header.data(), header.size())) TP_THROW(DataError, "data", name, ": cannot write: ", std::strerror(errno));
  const std::size_t element = size_of(array.type);
  const std::size_t piece_bytes = kPieceBytes - kPieceBytes % element;
  std::vector<unsigned char> piece(std::min(piece_bytes, array.bytes.size()));
  for (std::size_t offset = 0; offset < array.bytes.size(); offset += piece_bytes) {
    const std::size_t bytes = std::min(piece_bytes, array.bytes.size() - offset);
    std::memcpy(piece.data(), array.bytes.data() + offset, bytes);
    detail::swap_big_endian_in_place(piece.data(), bytes / element, element);
    if (!sink(piece.data(), bytes)) TP_THROW(DataError, "data", name, ": cannot write: ", std::strerror(errno));
  }
}

}  // namespace

void write_idx(const std::filesystem::path& path, const IdxArray& array, IdxCompression compression) {
  array.validate();
  const std::string name = path.string();
  if (compression == IdxCompression::gzip) {
    gzFile file = gzopen(path.c_str(), "wb");
    if (file == nullptr) TP_THROW(DataError, "data", name, ": cannot create: ", std::strerror(errno));
    try {
      write_all(
          array,
          [file](const unsigned char* data, std::size_t bytes) {
            return gzwrite(file, data, static_cast<unsigned>(bytes)) == static_cast<int>(bytes);
          },
          name);
    } catch (...) {
      gzclose(file);
      throw;
    }
    if (gzclose(file) != Z_OK) TP_THROW(DataError, "data", name, ": cannot finish the gzip stream");
    return;
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (file == nullptr) TP_THROW(DataError, "data", name, ": cannot create: ", std::strerror(errno));
  write_all(
      array,
      [&file](const unsigned char* data, std::size_t bytes) {
        return std::fwrite(data, 1, bytes, file.get()) == bytes;
      },
      name);
  if (std::fclose(file.release()) != 0) TP_THROW(DataError, "data", name, ": cannot write: ", std::strerror(errno));
}

}  // namespace tp::data
