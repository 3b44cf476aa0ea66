// SPDX-License-Identifier: Apache-2.0
#include "arbiter/process_identity.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tp::arbiter::detail {
namespace {

struct StatFields {
  char state = '?';
  std::uint64_t start_time = 0;
};

// Parses /proc/<pid>/stat. Field 2 (comm) is in parentheses and may itself hold spaces and ')', so fields
// are counted from the last ')': field 3 (state) follows it, field 22 (starttime) is 19 fields later.
std::optional<StatFields> read_stat(pid_t pid) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[4096];
  std::size_t length = 0;
  while (length < sizeof text - 1) {
    const ssize_t got = ::read(fd, text + length, sizeof text - 1 - length);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    length += static_cast<std::size_t>(got);
  }
  ::close(fd);
  text[length] = '\0';

  const char* close_paren = std::strrchr(text, ')');
  if (close_paren == nullptr || close_paren[1] != ' ') return std::nullopt;
  StatFields fields;
  fields.state = close_paren[2];
  const char* cursor = close_paren + 2;
  for (int field = 3; field < 22; ++field) {
    cursor = std::strchr(cursor, ' ');
    if (cursor == nullptr) return std::nullopt;
    ++cursor;
  }
  char* end = nullptr;
  fields.start_time = std::strtoull(cursor, &end, 10);
  if (end == cursor) return std::nullopt;
  return fields;
}

}  // namespace

std::optional<std::uint64_t> process_start_time(pid_t pid) noexcept {
  const std::optional<StatFields> fields = read_stat(pid);
  if (!fields) return std::nullopt;
  return fields->start_time;
}

bool process_is_gone(pid_t pid, std::uint64_t start_time) noexcept {
  if (pid <= 0) return true;
  // EPERM means the process exists but belongs to someone else: not gone.
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::optional<StatFields> fields = read_stat(pid);
  if (!fields) return true;  // vanished between the two checks
  return fields->start_time != start_time || fields->state == 'Z' || fields->state == 'X';
}

}  // namespace tp::arbiter::detail
