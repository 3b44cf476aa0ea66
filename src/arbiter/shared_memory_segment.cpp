// SPDX-License-Identifier: Apache-2.0
#include "arbiter/shared_memory_segment.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"

namespace tp::arbiter::detail {
namespace {

constexpr mode_t kSegmentMode = 0600;

std::string remove_hint(const std::string& name) {
  return "When no process uses it, remove it with tp::arbiter::SharedMemoryArbiter::remove(\"" + name +
         "\") or `rm /dev/shm" + name + "`, or pick another segment name";
}

// Owns the descriptor while the segment is opened and checked; closing it releases the flock.
class SegmentFile {
 public:
  explicit SegmentFile(const std::string& name) {
    fd_ = ::shm_open(name.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, kSegmentMode);
    if (fd_ < 0) {
      const int error = errno;
      TP_THROW(DeviceError, "runtime", "shared-memory arbiter: shm_open(\"", name, "\") failed: ", std::strerror(error),
               error == EACCES ? ". Another user probably owns the segment; use a segment name of your own" : "");
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd_);
      TP_THROW(DeviceError, "runtime", "shared-memory arbiter: flock on segment ", name,
               " failed: ", std::strerror(error));
    }
  }
  // Unlocks explicitly: the mapping keeps the open file description (and so a flock) alive after close.
  ~SegmentFile() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  SegmentFile(const SegmentFile&) = delete;
  SegmentFile& operator=(const SegmentFile&) = delete;

  int fd() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

// Checks ownership and mode; sizes a fresh segment. Returns true when the file was empty (newly created).
bool check_file(int fd, const std::string& name) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter: fstat of segment ", name,
             " failed: ", std::strerror(errno));
  }
  if (info.st_uid != ::geteuid()) {
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter: segment ", name, " is owned by uid ", info.st_uid,
             ", not by this process's uid ", ::geteuid(), "; it will not share a budget with another user. ",
             remove_hint(name));
  }
  const bool fresh = info.st_size == 0;
  if (fresh) {
    // shm_open's mode went through the umask; make it exactly 0600, whatever the umask.
    if (::fchmod(fd, kSegmentMode) != 0 || ::ftruncate(fd, sizeof(SharedTable)) != 0) {
      TP_THROW(DeviceError, "runtime", "shared-memory arbiter: cannot size segment ", name, " to ", sizeof(SharedTable),
               " bytes: ", std::strerror(errno));
    }
    return true;
  }
  if ((info.st_mode & 0777) != kSegmentMode) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 0777));
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter: segment ", name, " has mode ", mode,
             "; only mode 0600 (owner only) is trusted. ", remove_hint(name));
  }
  if (static_cast<std::size_t>(info.st_size) != sizeof(SharedTable)) {
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter: segment ", name, " is ", info.st_size,
             " bytes, but this build's layout (version ", kLayoutVersion, ") needs ", sizeof(SharedTable),
             "; another tensorpool version made it. ", remove_hint(name));
  }
  return false;
}

void initialise(SharedTable& table, const std::string& name, std::size_t budget_bytes) {
  std::memset(static_cast<void*>(&table), 0, sizeof table);
  pthread_mutexattr_t attributes;
  pthread_mutexattr_init(&attributes);
  pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
  const int result = pthread_mutex_init(&table.header.mutex, &attributes);
  pthread_mutexattr_destroy(&attributes);
  if (result != 0) {
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter: cannot create the robust process-shared mutex of segment ",
             name, ": ", std::strerror(result));
  }
  table.header.layout_version = kLayoutVersion;
  table.header.slot_count = kSlotCount;
  table.header.budget_bytes = budget_bytes;
  table.header.generation = 1;
  table.header.table_bytes = sizeof(SharedTable);
  // Readers trust the table only once magic is set; the flock orders this store before their check.
  table.header.magic = kSegmentMagic;
}

void check_header(const SharedHeader& header, const std::string& name, std::size_t budget_bytes) {
  if (header.layout_version != kLayoutVersion || header.slot_count != kSlotCount ||
      header.table_bytes != sizeof(SharedTable)) {
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter: segment ", name, " has layout version ",
             header.layout_version, " with ", header.slot_count, " slots; this build uses version ", kLayoutVersion,
             " with ", kSlotCount, ". Every process sharing a budget must run the same tensorpool version. ",
             remove_hint(name));
  }
  if (header.budget_bytes != budget_bytes) {
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter: segment ", name, " was created with a budget of ",
             format_bytes(header.budget_bytes), " (", header.budget_bytes, " bytes), but this process asks for ",
             format_bytes(budget_bytes), " (", budget_bytes,
             " bytes). Open it with the same budget as the other "
             "processes. ",
             remove_hint(name));
  }
}

}  // namespace

void check_segment_name(const std::string& name) {
  if (name.size() < 2 || name.size() > 255 || name.front() != '/' || name.find('/', 1) != std::string::npos) {
    TP_THROW(InvalidArgument, "runtime", "shared-memory arbiter: segment name \"", name,
             "\" must be \"/\" followed by 1 to 254 characters without another \"/\", e.g. \"/tensorpool-gpu0\"");
  }
}

SharedTable* map_segment(const std::string& name, std::size_t budget_bytes) {
  SegmentFile file(name);
  check_file(file.fd(), name);
  void* address = ::mmap(nullptr, sizeof(SharedTable), PROT_READ | PROT_WRITE, MAP_SHARED, file.fd(), 0);
  if (address == MAP_FAILED) {
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter: cannot map segment ", name, ": ", std::strerror(errno));
  }
  auto* table = static_cast<SharedTable*>(address);
  try {
    // Not set: fresh, or its creator died before finishing; nobody can have used it either way.
    if (table->header.magic != kSegmentMagic) {
      initialise(*table, name, budget_bytes);
    } else {
      check_header(table->header, name, budget_bytes);
    }
  } catch (...) {
    unmap_segment(table);
    throw;
  }
  return table;
}

void unmap_segment(SharedTable* table) noexcept {
  if (table != nullptr) ::munmap(table, sizeof(SharedTable));
}

bool unlink_segment(const std::string& name) {
  check_segment_name(name);
  if (::shm_unlink(name.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  TP_THROW(DeviceError, "runtime", "shared-memory arbiter: cannot remove segment ", name, ": ", std::strerror(errno));
}

}  // namespace tp::arbiter::detail
