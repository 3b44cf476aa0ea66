#include "tensorpool/distribute/communicator.hpp"

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/ops/elementwise.hpp"

namespace tp::distribute {

namespace {

// The elements [begin, end) of a tensor, as a flat view.
Tensor range(const Tensor& tensor, std::int64_t begin, std::int64_t end) {
  return tensor.reshape(Shape{tensor.num_elements()}).slice(begin, end);
}

// source -> target in stream order on both devices (through host staging between devices).
void send(const Tensor& source, const Tensor& target) {
  device::copy(source.device().stream(0), source.buffer(), source.offset_bytes(), target.device().stream(0),
               target.buffer(), target.offset_bytes(), target.nbytes());
}

void accumulate(const Tensor& target, const Tensor& addend) {
  ops::add_scaled(target, 1.0, addend, {.stream = &target.device().stream(0)});
}

// Ring over R participants: chunk k is [k * chunk, min(n, (k + 1) * chunk)). Reduce-scatter: in step s,
// participant r sends chunk (r - s) mod R to r + 1, which adds it to its own; after R - 1 steps participant r
// holds the full sum of chunk (r + 1) mod R. All-gather: R - 1 steps passing the reduced chunks on.
class RingCommunicator final : public Communicator {
 public:
  std::string_view name() const noexcept override { return "ring"; }
  std::int64_t scratch_elements(std::int64_t elements, std::size_t participants, std::size_t) const override {
    const auto count = static_cast<std::int64_t>(participants);
    return participants <= 1 ? 0 : (elements + count - 1) / count;
  }

 private:
  void do_all_reduce(std::span<const Tensor> tensors, std::span<const Tensor> scratch) override {
    const auto participants = static_cast<std::int64_t>(tensors.size());
    if (participants <= 1) return;
    const std::int64_t elements = tensors[0].num_elements();
    const std::int64_t chunk = scratch_elements(elements, tensors.size(), 0);
    auto chunk_range = [&](std::int64_t k) {
      const std::int64_t begin = std::min(elements, k * chunk);
      return std::pair{begin, std::min(elements, begin + chunk)};
    };
    auto wrap = [participants](std::int64_t value) { return ((value % participants) + participants) % participants; };
    for (std::int64_t step = 0; step + 1 < participants; ++step) {
      for (std::int64_t rank = 0; rank < participants; ++rank) {
        const auto [begin, end] = chunk_range(wrap(rank - step));
        if (begin == end) continue;
        const auto next = static_cast<std::size_t>(wrap(rank + 1));
        const Tensor received = range(scratch[next], 0, end - begin);
        send(range(tensors[static_cast<std::size_t>(rank)], begin, end), received);
        accumulate(range(tensors[next], begin, end), received);
      }
    }
    for (std::int64_t step = 0; step + 1 < participants; ++step) {
      for (std::int64_t rank = 0; rank < participants; ++rank) {
        const auto [begin, end] = chunk_range(wrap(rank + 1 - step));
        if (begin == end) continue;
        const auto next = static_cast<std::size_t>(wrap(rank + 1));
        send(range(tensors[static_cast<std::size_t>(rank)], begin, end), range(tensors[next], begin, end));
      }
    }
  }
};

class ReduceToOneCommunicator final : public Communicator {
 public:
  std::string_view name() const noexcept override { return "reduce_to_one"; }
  std::int64_t scratch_elements(std::int64_t elements, std::size_t participants, std::size_t index) const override {
    return participants > 1 && index == 0 ? elements : 0;
  }

 private:
  void do_all_reduce(std::span<const Tensor> tensors, std::span<const Tensor> scratch) override {
    if (tensors.size() <= 1) return;
    const std::int64_t elements = tensors[0].num_elements();
    const Tensor received = range(scratch[0], 0, elements);
    const Tensor total = range(tensors[0], 0, elements);
    for (std::size_t rank = 1; rank < tensors.size(); ++rank) {
      send(range(tensors[rank], 0, elements), received);
      accumulate(total, received);
    }
    for (std::size_t rank = 1; rank < tensors.size(); ++rank) send(total, range(tensors[rank], 0, elements));
  }
};

}  // namespace

void Communicator::all_reduce(std::span<const Tensor> tensors, std::span<const Tensor> scratch) {
  if (tensors.empty()) TP_THROW(InvalidArgument, "distribute", name(), " all_reduce: no tensors");
  if (scratch.size() != tensors.size()) {
    TP_THROW(InvalidArgument, "distribute", name(), " all_reduce: ", tensors.size(), " tensors but ", scratch.size(),
             " scratch buffers");
  }
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    const Tensor& tensor = tensors[index];
    if (tensor.dtype() != tensors[0].dtype() || tensor.num_elements() != tensors[0].num_elements()) {
      TP_THROW(InvalidArgument, "distribute", name(), " all_reduce: participant ", index, " holds ",
               name_of(tensor.dtype()), tensor.shape(), " but participant 0 holds ", name_of(tensors[0].dtype()),
               tensors[0].shape());
    }
    const std::int64_t needed = scratch_elements(tensor.num_elements(), tensors.size(), index);
    if (scratch[index].num_elements() < needed || &scratch[index].device() != &tensor.device() ||
        scratch[index].dtype() != tensor.dtype()) {
      TP_THROW(InvalidArgument, "distribute", name(), " all_reduce: participant ", index, " needs ", needed,
               " elements of ", name_of(tensor.dtype()), " scratch on ", tensor.device().name());
    }
  }
  do_all_reduce(tensors, scratch);
}

std::unique_ptr<Communicator> make_communicator(std::string_view algorithm) {
  if (algorithm == "ring") return std::make_unique<RingCommunicator>();
  if (algorithm == "reduce_to_one") return std::make_unique<ReduceToOneCommunicator>();
  TP_THROW(InvalidArgument, "distribute", "all-reduce algorithm '", algorithm, "' is not ring or reduce_to_one");
}

}  // namespace tp::distribute
