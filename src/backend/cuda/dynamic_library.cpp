// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/dynamic_library.hpp"

#include <dlfcn.h>

#include <utility>

#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda {

DynamicLibrary DynamicLibrary::open(std::string_view component, std::string_view what,
                                    const std::vector<std::string>& names, std::string_view fix) {
  std::string tried;
  std::string why = "no name to try";
  for (const std::string& name : names) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      return DynamicLibrary(handle, std::string(component), std::string(what), name, std::string(fix));
    }
    const char* error = dlerror();
    tried += (tried.empty() ? "" : ", ") + name;
    why = error != nullptr ? error : "unknown dlopen error";
  }
  TP_THROW(DeviceError, component, "cannot load ", what, " (", tried, "): ", why, "; ", fix);
}

DynamicLibrary::DynamicLibrary(void* handle, std::string component, std::string what, std::string path, std::string fix)
    : handle_(handle),
      component_(std::move(component)),
      what_(std::move(what)),
      path_(std::move(path)),
      fix_(std::move(fix)) {}

void* DynamicLibrary::address_of(const char* symbol) const {
  void* address = dlsym(handle_, symbol);
  if (address == nullptr) {
    TP_THROW(DeviceError, component_, what_, " (", path_, ") has no function ", symbol, "; ", fix_);
  }
  return address;
}

}  // namespace tp::backend::cuda
