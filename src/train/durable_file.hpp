// SPDX-License-Identifier: Apache-2.0
#pragma once
// Durable, atomic file replacement: write `<target>.tmp`, fsync it, rename it over `target`, fsync the
// directory. Readers see either the old file or the whole new one, and after commit() returns the new one
// survives a power loss. Shared by checkpoints, the `latest` pointer and the JSON history.
//
// Every OS failure throws tp::DeviceError naming the path, the operation and strerror(errno); the target is
// then untouched and the temporary file is removed.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

namespace tp::train::detail {

class DurableFileWriter {
 public:
  // Creates (truncates) `<target>.tmp`; `what` ("checkpoint", "history"...) prefixes error messages.
  DurableFileWriter(std::filesystem::path target, std::string_view what);
  ~DurableFileWriter();  // without commit(): closes and removes the temporary file (noexcept)
  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;

  void write(const void* data, std::size_t size);
  // Flushes, fsyncs, closes, renames over the target and fsyncs the directory. Call once.
  void commit();

  const std::filesystem::path& temporary_path() const noexcept { return temporary_; }

 private:
  void flush_buffer();
  void write_through(const std::uint8_t* data, std::size_t size);
  [[noreturn]] void fail(std::string_view operation, const std::filesystem::path& path, int error_number);

  std::filesystem::path target_;
  std::filesystem::path temporary_;
  std::string what_;
  int fd_ = -1;                       // open temporary file, -1 once closed
  std::vector<std::uint8_t> buffer_;  // pending bytes; invariant: size() < kBufferBytes between calls
  bool finished_ = false;             // committed, or failed and cleaned up: the destructor has nothing to do
};

// Writes `contents` to `target` through a DurableFileWriter.
void write_file_durably(const std::filesystem::path& target, std::string_view contents, std::string_view what);

// fsync of a directory, so a rename or a new entry in it is durable. Throws tp::DeviceError naming it.
void fsync_directory(const std::filesystem::path& directory, std::string_view what);

// The whole of `file`. Throws tp::DataError when it does not exist (naming it, with `what`), tp::DeviceError
// naming it and the OS's reason on any other failure.
std::vector<std::uint8_t> read_whole_file(const std::filesystem::path& file, std::string_view what);

}  // namespace tp::train::detail
