// SPDX-License-Identifier: Apache-2.0
#include "process_memory.hpp"

#include <dlfcn.h>
#include <sys/resource.h>

#include <fstream>
#include <sstream>
#include <string_view>

namespace tp::bench {
namespace {

// A "Name:   1234 kB" line of /proc/self/status, in bytes.
std::size_t status_field_bytes(std::string_view field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 && line[field.size()] == ':') {
      std::istringstream values(line.substr(field.size() + 1));
      std::size_t kib = 0;
      values >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

}  // namespace

std::size_t current_rss_bytes() { return status_field_bytes("VmRSS"); }
std::size_t peak_rss_bytes() { return status_field_bytes("VmHWM"); }

std::size_t max_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;
}

bool reset_peak_rss() noexcept {
  std::ofstream clear_refs("/proc/self/clear_refs");
  if (!clear_refs) return false;
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

std::string malloc_library() {
  void* symbol = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info{};
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "unknown";
  return info.dli_fname;
}

std::string malloc_implementation(const std::string& library) {
  if (library.find("jemalloc") != std::string::npos) return "jemalloc";
  if (library.find("mimalloc") != std::string::npos) return "mimalloc";
  if (library.find("libc.so") != std::string::npos) return "glibc";
  return "unknown";
}

}  // namespace tp::bench
