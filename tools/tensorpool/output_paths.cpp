// SPDX-License-Identifier: Apache-2.0
#include "output_paths.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "tensorpool/core/error.hpp"

namespace tp::cli {
namespace {

namespace fs = std::filesystem;

// Creates and removes a uniquely named file in `directory`; the errno of a failed creation, else 0.
int probe_directory(const fs::path& directory) {
  const fs::path probe = directory / (".tensorpool-write-check-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return 0;
}

// The directory `path` would be created in: its nearest ancestor that exists ("." for a relative leaf).
fs::path nearest_existing(const fs::path& path) {
  std::error_code error;
  fs::path candidate = path;
  while (!candidate.empty() && !fs::exists(candidate, error)) candidate = candidate.parent_path();
  return candidate.empty() ? fs::path(".") : candidate;
}

}  // namespace

void check_writable_file(const std::string& path, const char* flag, const char* command) {
  if (path.empty()) return;
  std::error_code error;
  const fs::path file(path);
  if (fs::is_directory(file, error)) {
    TP_THROW(InvalidArgument, command, flag, " ", path, " is a directory; give the path of a file");
  }
  if (fs::exists(file, error)) {
    const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);  // no O_TRUNC: nothing changes
    if (fd < 0) {
      TP_THROW(InvalidArgument, command, flag, " ", path, " cannot be written (", std::strerror(errno),
               "); give a writable path");
    }
    ::close(fd);
    return;
  }
  const fs::path parent = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, error)) {
    TP_THROW(InvalidArgument, command, flag, " ", path, ": the directory ", parent.string(),
             " does not exist; create it first or give a path in an existing directory");
  }
  if (const int reason = probe_directory(parent); reason != 0) {
    TP_THROW(InvalidArgument, command, flag, " ", path, ": cannot create a file in ", parent.string(), " (",
             std::strerror(reason), "); give a path in a writable directory");
  }
}

void check_writable_directory(const std::string& path, const char* flag, const char* command) {
  if (path.empty()) return;
  std::error_code error;
  const fs::path existing = nearest_existing(fs::path(path));
  if (!fs::is_directory(existing, error)) {
    TP_THROW(InvalidArgument, command, flag, " ", path, ": ", existing.string(),
             " is not a directory; give a directory path");
  }
  if (const int reason = probe_directory(existing); reason != 0) {
    TP_THROW(InvalidArgument, command, flag, " ", path, ": cannot create files in ", existing.string(), " (",
             std::strerror(reason), "); give a directory where this process may write");
  }
}

}  // namespace tp::cli
