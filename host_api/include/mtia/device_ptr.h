// DevicePtr: a device address as a small value type, so device and host pointers cannot be
// mixed up by accident. Arithmetic is in bytes.
//
// Device DRAM starts at address 0 (isa/address_map.h), so address 0 is not special: a
// default-constructed DevicePtr is simply address 0 and is not a "null" marker.
#pragma once

#include <compare>
#include <cstdint>

namespace mtia {

class DevicePtr {
 public:
  constexpr DevicePtr() = default;
  constexpr explicit DevicePtr(uint64_t address) : address_(address) {}

  constexpr uint64_t address() const { return address_; }

  // Byte offsets. The result must stay inside the allocation to be usable in a call; the
  // API checks that on use, not here.
  constexpr DevicePtr operator+(int64_t bytes) const {
    return DevicePtr(address_ + static_cast<uint64_t>(bytes));
  }
  constexpr DevicePtr operator-(int64_t bytes) const {
    return DevicePtr(address_ - static_cast<uint64_t>(bytes));
  }
  constexpr DevicePtr& operator+=(int64_t bytes) { return *this = *this + bytes; }
  constexpr DevicePtr& operator-=(int64_t bytes) { return *this = *this - bytes; }
  // Distance in bytes between two pointers.
  constexpr int64_t operator-(DevicePtr other) const {
    return static_cast<int64_t>(address_ - other.address_);
  }

  constexpr auto operator<=>(const DevicePtr&) const = default;

 private:
  uint64_t address_ = 0;
};

}  // namespace mtia
