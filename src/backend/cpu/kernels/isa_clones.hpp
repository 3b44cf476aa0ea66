// SPDX-License-Identifier: Apache-2.0
#pragma once
// TP_ISA_CLONES is core's (core/isa_clones.hpp): the data pipeline's host conversions in core use it too.
#include "core/isa_clones.hpp"
