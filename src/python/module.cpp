// SPDX-License-Identifier: Apache-2.0
#include "python/bindings.hpp"

NB_MODULE(_tensorpool, module) {
  module.doc() = "tensorpool's C++ runtime; use the tensorpool package, which wraps it";
  tp::python::bind_errors(module);
  tp::python::bind_tensor(module);
  tp::python::bind_devices(module);
  tp::python::bind_data(module);
  tp::python::bind_datasets(module);
  tp::python::bind_strategy(module);
  tp::python::bind_train(module);
  tp::python::bind_memory(module);
}
