// SPDX-License-Identifier: Apache-2.0
#pragma once
// The extension module tensorpool._tensorpool: one bind_* function per area, each in its own file, called in
// this order by module.cpp (a later area may use the classes an earlier one bound). The pure-Python package
// (python/tensorpool/) builds TensorFlow's and Keras's names over them; nothing here is public API itself.
#include <nanobind/nanobind.h>

namespace tp::python {

namespace nb = nanobind;

void bind_errors(nb::module_& module);    // errors.cpp: tp::Error subclasses -> tensorpool.errors classes
void bind_tensor(nb::module_& module);    // tensor.cpp: Tensor, dtypes, numpy in and out
void bind_devices(nb::module_& module);   // devices.cpp: the device manager's configuration, devices, memory stats
void bind_data(nb::module_& module);      // data.cpp: Dataset from numpy arrays, the Fashion-MNIST files
void bind_datasets(nb::module_& module);  // datasets.cpp: the Keras datasets' files (Fashion-MNIST, MNIST) as numpy
void bind_strategy(nb::module_& module);  // strategy.cpp: train::Strategy, the distribution strategies' spec
void bind_train(nb::module_& module);     // train.cpp: Sequential, compile, fit, evaluate, predict, checkpoints
void bind_memory(nb::module_& module);    // memory.cpp: memory summary, snapshot, estimate, profiler

}  // namespace tp::python
