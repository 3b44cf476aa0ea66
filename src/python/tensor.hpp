// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Python Tensor (tensorpool._tensorpool.Tensor, bound in tensor.cpp): a tp::Tensor plus whether Python may
// write through it. Other binding files take and return it to exchange tensors with Python.
#include "tensorpool/core/tensor.hpp"

namespace tp::python {

struct PyTensor {
  Tensor tensor;
  // Set when the tensor borrows a read-only numpy array: its numpy() views are read-only too.
  bool readonly = false;
};

}  // namespace tp::python
