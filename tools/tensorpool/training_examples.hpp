// SPDX-License-Identifier: Apache-2.0
#pragma once
// `tensorpool train --limit-train N`: train on exactly the first N examples of the training file (taken
// before the per-epoch shuffle, so --seed still fixes the run), and the batch size that goes with it.
#include <cstdint>
#include <string>

#include "tensorpool/data/fashion_mnist.hpp"

namespace tp::cli {

// Refuses a negative limit (throws tp::InvalidArgument naming --limit-train); 0, the default, means every example.
void validate_limit_train(std::int64_t limit);

// Keeps the first `limit` training examples of `mnist` (all of them when 0). A limit above the examples
// the files hold is refused, naming --limit-train, the count and `directory`.
void limit_training_examples(data::FashionMnist& mnist, std::int64_t limit, const std::string& directory);

// A step trains on one batch, so a batch larger than the training set is refused (naming --batch-size, the
// examples and, when limited, --limit-train) rather than run as a smaller step than the plan was made for.
void check_batch_fits_examples(std::int64_t batch_size, std::int64_t examples, bool limited, const char* command);

}  // namespace tp::cli
