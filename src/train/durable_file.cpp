// SPDX-License-Identifier: Apache-2.0
#include "durable_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "tensorpool/core/error.hpp"

namespace tp::train::detail {
namespace {

constexpr std::size_t kBufferBytes = std::size_t{1} << 20;

void close_quietly(int fd) noexcept {
  if (fd >= 0) ::close(fd);
}

}  // namespace

DurableFileWriter::DurableFileWriter(std::filesystem::path target, std::string_view what)
    : target_(std::move(target)), what_(what) {
  temporary_ = target_;
  temporary_ += ".tmp";
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    // Not fail(): whatever is at that path is not a file we created, so it is not ours to remove.
    const int error_number = errno;
    TP_THROW(DeviceError, "train", what_, ": cannot create '", temporary_.string(), "': ", std::strerror(error_number));
  }
}

DurableFileWriter::~DurableFileWriter() {
  if (finished_) return;
  close_quietly(fd_);
  std::error_code ignored;
  std::filesystem::remove(temporary_, ignored);
}

void DurableFileWriter::fail(std::string_view operation, const std::filesystem::path& path, int error_number) {
  close_quietly(fd_);
  fd_ = -1;
  std::error_code ignored;
  std::filesystem::remove(temporary_, ignored);
  finished_ = true;  // nothing left for the destructor to undo
  TP_THROW(DeviceError, "train", what_, ": ", operation, " '", path.string(), "': ", std::strerror(error_number));
}

void DurableFileWriter::write_through(const std::uint8_t* data, std::size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd_, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", temporary_, errno);
    }
    data += written;
    size -= static_cast<std::size_t>(written);
  }
}

void DurableFileWriter::flush_buffer() {
  write_through(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void DurableFileWriter::write(const void* data, std::size_t size) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  if (buffer_.size() + size < kBufferBytes) {
    buffer_.insert(buffer_.end(), bytes, bytes + size);
    return;
  }
  flush_buffer();
  if (size < kBufferBytes) {
    buffer_.insert(buffer_.end(), bytes, bytes + size);
  } else {
    write_through(bytes, size);  // large runs (tensor bytes) skip the copy
  }
}

void DurableFileWriter::commit() {
  flush_buffer();
  if (::fsync(fd_) != 0) fail("cannot fsync", temporary_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", temporary_, errno);  // NFS reports write errors here
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) fail("cannot rename into", target_, errno);
  finished_ = true;
  fsync_directory(target_.has_parent_path() ? target_.parent_path() : std::filesystem::path("."), what_);
}

void write_file_durably(const std::filesystem::path& target, std::string_view contents, std::string_view what) {
  DurableFileWriter writer(target, what);
  writer.write(contents.data(), contents.size());
  writer.commit();
}

void fsync_directory(const std::filesystem::path& directory, std::string_view what) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int error_number = errno;
    TP_THROW(DeviceError, "train", what, ": cannot open directory '", directory.string(),
             "' to sync it: ", std::strerror(error_number));
  }
  // Some file systems cannot sync a directory (EINVAL); their renames are as durable as they get.
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const int error_number = errno;
    close_quietly(fd);
    TP_THROW(DeviceError, "train", what, ": cannot fsync directory '", directory.string(),
             "': ", std::strerror(error_number));
  }
  close_quietly(fd);
}

std::vector<std::uint8_t> read_whole_file(const std::filesystem::path& file, std::string_view what) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error_number = errno;
    if (error_number == ENOENT) TP_THROW(DataError, "train", file.string(), ": ", what, " does not exist");
    TP_THROW(DeviceError, "train", what, ": cannot open '", file.string(), "': ", std::strerror(error_number));
  }
  // Read straight into the result: sized from fstat plus one byte, so EOF shows without a regrowth; a file
  // that grows meanwhile still reads whole.
  struct stat info {};
  const std::size_t expected = ::fstat(fd, &info) == 0 && info.st_size > 0 ? static_cast<std::size_t>(info.st_size) : 0;
  std::vector<std::uint8_t> bytes(expected + 1);
  std::size_t used = 0;
  for (;;) {
    if (used == bytes.size()) bytes.resize(bytes.size() * 2);
    const ssize_t got = ::read(fd, bytes.data() + used, bytes.size() - used);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      close_quietly(fd);
      TP_THROW(DeviceError, "train", what, ": cannot read '", file.string(), "': ", std::strerror(error_number));
    }
    if (got == 0) break;
    used += static_cast<std::size_t>(got);
  }
  bytes.resize(used);
  close_quietly(fd);
  return bytes;
}

}  // namespace tp::train::detail
