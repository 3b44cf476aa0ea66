// SPDX-License-Identifier: Apache-2.0
#include "python/bindings.hpp"

namespace tp::python {

void bind_datasets(nb::module_& module) { static_cast<void>(module); }

}  // namespace tp::python
