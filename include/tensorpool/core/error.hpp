// SPDX-License-Identifier: Apache-2.0
#pragma once
// One error policy for all of tensorpool: typed exceptions, thrown through TP_THROW, which prefixes the
// message with "[component]" and appends the throwing site (file:line). User input is validated with these;
// internal invariants use assert.

#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tp {

// Base of every tensorpool error except OutOfMemoryError (which must stay a std::bad_alloc).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed a value that can never work (bad size, alignment, configuration, trace line...).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A device or the operating system refused an operation (mmap, mlock, a device API).
class DeviceError : public Error {
 public:
  using Error::Error;
};

// Input data (a file, a trace, a dataset) is malformed.
class DataError : public Error {
 public:
  using Error::Error;
};

namespace detail {

std::string format_error(std::string_view component, std::string_view message, const char* file, int line);

template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream stream;
  (stream << ... << parts);
  return stream.str();
}

}  // namespace detail
}  // namespace tp

// TP_THROW(tp::InvalidArgument, "memory", "alignment ", value, " is not a power of two")
#define TP_THROW(ErrorType, component, ...) \
  throw ErrorType(::tp::detail::format_error((component), ::tp::detail::concat(__VA_ARGS__), __FILE__, __LINE__))
