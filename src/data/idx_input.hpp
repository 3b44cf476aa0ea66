// SPDX-License-Identifier: Apache-2.0
#pragma once
// IdxInput: one file read front to back as a byte stream, inflated on the fly when it starts with the gzip
// magic (1f 8b). The IDX parser sits on top and never knows which it got.
//
// End-of-data policy: read() returns fewer bytes than asked only at the end of the data. When a gzip stream
// ends before its trailer (the .gz file was cut short), read() returns what could be inflated and
// truncated() becomes true, so the parser can report the short payload in IDX terms ("header says 10000
// labels, file holds 9998") and add that the compressed stream itself is cut. A stream that is corrupt
// (bad deflate data, CRC or length mismatch in the trailer, data after the last member that is not gzip)
// raises tp::DataError naming the file and zlib's diagnosis.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tp::data::detail {

class IdxInput {
 public:
  // Throws tp::DataError naming the file when it does not exist, is a directory or cannot be opened.
  explicit IdxInput(const std::filesystem::path& path);
  ~IdxInput();
  IdxInput(const IdxInput&) = delete;
  IdxInput& operator=(const IdxInput&) = delete;

  // Reads up to `bytes` into `destination`; fewer only at the end of the data (see the header comment).
  std::size_t read(void* destination, std::size_t bytes);
  // Reads and discards everything left, returning how many (decompressed) bytes that was. For a gzip file
  // this also verifies the trailer of the last member, so a file is fully checked only after this call.
  std::uint64_t drain();

  bool gzip() const noexcept { return gzip_; }
  bool truncated() const noexcept { return truncated_; }
  // Bytes of the file on disk.
  std::uint64_t file_bytes() const noexcept { return file_bytes_; }
  // The path as given, for messages.
  const std::string& name() const noexcept { return name_; }

 private:
  struct Inflater;  // zlib state, only for gzip files

  std::size_t read_raw(void* destination, std::size_t bytes);
  std::size_t read_gzip(void* destination, std::size_t bytes);
  bool refill();  // more compressed input into input_; false at the end of the file

  std::string name_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
  std::uint64_t file_bytes_ = 0;
  bool gzip_ = false;
  bool truncated_ = false;
  std::vector<unsigned char> input_;  // gzip: compressed bytes read from the file, not yet all inflated
  std::unique_ptr<Inflater> inflater_;
};

}  // namespace tp::data::detail
