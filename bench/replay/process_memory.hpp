// SPDX-License-Identifier: Apache-2.0
#pragma once
// Resident-set measurements of the current process (Linux /proc), for the footprint mode of the worker.

#include <cstddef>
#include <string>

namespace tp::bench {

// VmRSS of /proc/self/status in bytes; 0 when unreadable.
std::size_t current_rss_bytes();
// VmHWM (peak resident set) of /proc/self/status in bytes; 0 when unreadable.
std::size_t peak_rss_bytes();
// getrusage(RUSAGE_SELF).ru_maxrss in bytes.
std::size_t max_rss_bytes();
// Restarts VmHWM from the current RSS (writes "5" to /proc/self/clear_refs); false when the kernel refuses.
bool reset_peak_rss() noexcept;

// The shared object that provides the process's `malloc` (dladdr of the symbol the dynamic linker binds),
// e.g. "/lib/x86_64-linux-gnu/libjemalloc.so.2"; and a short name for it: jemalloc, mimalloc or glibc.
std::string malloc_library();
std::string malloc_implementation(const std::string& library);

}  // namespace tp::bench
