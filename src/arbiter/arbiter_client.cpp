// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/arbiter/arbiter_client.hpp"

#include <utility>

namespace tp::arbiter {

ArbiterClient::ArbiterClient(MemoryArbiter& arbiter, std::string name, std::size_t quota_bytes)
    : arbiter_(&arbiter), id_(arbiter.register_client(name, quota_bytes)), name_(std::move(name)) {}

ArbiterClient::~ArbiterClient() { reset(); }

ArbiterClient::ArbiterClient(ArbiterClient&& other) noexcept
    : arbiter_(std::exchange(other.arbiter_, nullptr)),
      id_(std::exchange(other.id_, ClientId{})),
      name_(std::move(other.name_)) {}

ArbiterClient& ArbiterClient::operator=(ArbiterClient&& other) noexcept {
  if (this != &other) {
    reset();
    arbiter_ = std::exchange(other.arbiter_, nullptr);
    id_ = std::exchange(other.id_, ClientId{});
    name_ = std::move(other.name_);
  }
  return *this;
}

void ArbiterClient::reset() noexcept {
  if (arbiter_ == nullptr) return;
  arbiter_->unregister_client(id_);
  arbiter_ = nullptr;
  id_ = ClientId{};
}

}  // namespace tp::arbiter
