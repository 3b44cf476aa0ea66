// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the bindings share about errors (errors.cpp): the out-of-memory advice for a model trained from Python,
// filled by the library code `tensorpool train` uses (report/oom_advice.hpp), so fit() raises
// ResourceExhaustedError with the suggestion the CLI prints, in the package's terms (batch_size=N,
// tensorpool.memory.estimate, TP_ALLOCATOR, MirroredStrategy(shard=...)) instead of the CLI's flags.
#include <cstdint>
#include <string_view>

#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::python {

// Writes into `error`'s report (its suggestion, so what() and ResourceExhaustedError.suggestion say it) the
// fix for a step of `model` (compiled) at global `batch_size` over the model's devices: the largest batch size
// that fits, the allocator settings that make this one fit, what the arena holds, the optimizer state's share.
// `batches_on` names the device the batches are assembled on (cpu:0 unless they are fed in place), as in
// Sequential::plan. Call it in the handler, before rethrowing; it never throws (a failure to plan is said in
// the suggestion). It replays the plan on scratch memory: no device memory is touched.
void add_oom_advice(OutOfMemoryError& error, train::Sequential& model, std::int64_t batch_size,
                    std::string_view batches_on = {}) noexcept;

}  // namespace tp::python
