// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/logging_adaptor.hpp"

#include <new>
#include <ostream>
#include <utility>

#include "tensorpool/core/error.hpp"

namespace tp::memory {
namespace {

std::unique_ptr<std::ofstream> open_log(const std::filesystem::path& path) {
  auto file = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*file) {
    TP_THROW(DataError, "memory", "logging: cannot open trace file ", path.string(),
             " for writing; check that the directory exists and is writable");
  }
  return file;
}

}  // namespace

LoggingAdaptor::LoggingAdaptor(std::unique_ptr<MemoryResource> upstream, std::ostream& output, std::string name)
    : ResourceAdaptor(std::move(upstream), std::move(name)), output_(output), start_(std::chrono::steady_clock::now()) {
  write_header();
}

LoggingAdaptor::LoggingAdaptor(MemoryResource& upstream, std::ostream& output, std::string name)
    : ResourceAdaptor(upstream, std::move(name)), output_(output), start_(std::chrono::steady_clock::now()) {
  write_header();
}

LoggingAdaptor::LoggingAdaptor(std::unique_ptr<MemoryResource> upstream, const std::filesystem::path& path,
                               std::string name)
    : ResourceAdaptor(std::move(upstream), std::move(name)),
      file_(open_log(path)),
      output_(*file_),
      start_(std::chrono::steady_clock::now()) {
  write_header();
}

LoggingAdaptor::LoggingAdaptor(MemoryResource& upstream, const std::filesystem::path& path, std::string name)
    : ResourceAdaptor(upstream, std::move(name)),
      file_(open_log(path)),
      output_(*file_),
      start_(std::chrono::steady_clock::now()) {
  write_header();
}

LoggingAdaptor::~LoggingAdaptor() {
  const std::lock_guard lock(mutex_);
  output_.flush();
}

void LoggingAdaptor::flush() {
  const std::lock_guard lock(mutex_);
  output_.flush();
}

void LoggingAdaptor::write_header() {
  const std::lock_guard lock(mutex_);
  output_ << kTraceHeader << '\n';
}

void* LoggingAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  void* ptr = nullptr;
  try {
    ptr = upstream().allocate(bytes, alignment, tag);
  } catch (const std::bad_alloc&) {
    log(TraceAction::allocate_failure, nullptr, bytes);
    throw;
  }
  log(TraceAction::allocate, ptr, bytes);  // after the upstream: the pointer is ours from here on
  return ptr;
}

void LoggingAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  log(TraceAction::free, ptr, bytes);  // before the upstream: nobody can have reused the pointer yet
  upstream().deallocate(ptr, bytes);
}

void LoggingAdaptor::log(TraceAction action, const void* ptr, std::size_t bytes) noexcept {
  try {
    TraceEvent event;
    event.action = action;
    event.pointer = reinterpret_cast<std::uintptr_t>(ptr);
    event.size = bytes;
    const std::lock_guard lock(mutex_);
    const auto [it, inserted] = thread_ids_.emplace(std::this_thread::get_id(), thread_ids_.size());
    event.thread = it->second;
    event.time_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
    output_ << format_trace_line(event) << '\n';
  } catch (...) {
    // A log line that cannot be formatted or written must not turn a free into a crash; the stream's
    // error state tells the owner the trace is incomplete.
  }
}

}  // namespace tp::memory
