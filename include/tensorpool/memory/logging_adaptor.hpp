// SPDX-License-Identifier: Apache-2.0
#pragma once
// LoggingAdaptor: writes one trace CSV line (see trace.hpp) per allocate, free and allocate failure that
// passes through it, so a run can be replayed later against other allocators (`tensorpool replay`).
// Threads are numbered 0, 1, 2, ... in order of their first event; Time is integer nanoseconds since the
// adaptor was created (std::chrono::steady_clock); Stream is 0x0 (MemoryResource has no streams).
// Everything else passes through unchanged, tag included; an OutOfMemoryError is logged and rethrown.
//
// Invariant: the lines written form a valid trace: a free is logged before its memory goes back upstream
// and an allocate after the upstream returned it, so a pointer's free always precedes its reuse; lines and
// their times are written under one lock, so times never decrease down the file.
// Thread safety: mutex_ guards output_ (the stream), thread_ids_ and the clock reads; it is never held
// while calling the upstream. The stream is flushed by flush() and on destruction.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "tensorpool/memory/resource_adaptor.hpp"
#include "tensorpool/memory/trace.hpp"

namespace tp::memory {

class LoggingAdaptor final : public ResourceAdaptor {
 public:
  // Writes to `output`, which must outlive this adaptor. The header line is written at once.
  LoggingAdaptor(std::unique_ptr<MemoryResource> upstream, std::ostream& output, std::string name = "logging");
  LoggingAdaptor(MemoryResource& upstream, std::ostream& output, std::string name = "logging");
  // Creates (truncates) `path`; throws tp::DataError when it cannot be opened for writing.
  LoggingAdaptor(std::unique_ptr<MemoryResource> upstream, const std::filesystem::path& path,
                 std::string name = "logging");
  LoggingAdaptor(MemoryResource& upstream, const std::filesystem::path& path, std::string name = "logging");
  ~LoggingAdaptor() override;

  void flush();

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  void write_header();
  void log(TraceAction action, const void* ptr, std::size_t bytes) noexcept;

  // Immutable after construction.
  std::unique_ptr<std::ofstream> file_;  // set when constructed from a path; output_ refers to it then
  std::ostream& output_;
  const std::chrono::steady_clock::time_point start_;

  std::mutex mutex_;  // guards writes to output_ and thread_ids_
  std::unordered_map<std::thread::id, std::uint64_t> thread_ids_;
};

}  // namespace tp::memory
