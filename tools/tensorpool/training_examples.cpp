// SPDX-License-Identifier: Apache-2.0
#include "training_examples.hpp"

#include "tensorpool/core/error.hpp"

namespace tp::cli {
namespace {

// The first `count` rows (first-dimension entries) of `array`, in place.
void keep_first_rows(data::IdxArray& array, std::int64_t count) {
  const auto row_bytes = array.bytes.size() / static_cast<std::size_t>(array.dims[0]);
  array.dims[0] = count;
  array.bytes.resize(row_bytes * static_cast<std::size_t>(count));
  array.bytes.shrink_to_fit();
}

}  // namespace

void validate_limit_train(std::int64_t limit) {
  if (limit < 0) {
    TP_THROW(InvalidArgument, "train", "--limit-train ", limit,
             " is negative; give a number of examples (e.g. 2000), or 0 (the default) to train on every example");
  }
}

void limit_training_examples(data::FashionMnist& mnist, std::int64_t limit, const std::string& directory) {
  validate_limit_train(limit);
  if (limit == 0) return;
  const std::int64_t available = mnist.train_images.dims[0];
  if (limit > available) {
    TP_THROW(InvalidArgument, "train", "--limit-train ", limit, " is more than the ", available,
             " training examples in ", directory, "; give at most ", available, ", or 0 to train on all of them");
  }
  keep_first_rows(mnist.train_images, limit);
  keep_first_rows(mnist.train_labels, limit);
}

void check_batch_fits_examples(std::int64_t batch_size, std::int64_t examples, bool limited, const char* command) {
  if (batch_size <= examples) return;
  TP_THROW(InvalidArgument, command, "--batch-size ", batch_size, " is larger than the ", examples,
           " training examples", limited ? " (--limit-train)" : "", "; a step trains on one batch: give at most ",
           examples);
}

}  // namespace tp::cli
