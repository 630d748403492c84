// Payload bytes over simulated time on one memory or link, for the trace's bandwidth counters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mtia::trace {

// Bins that start 100 ns wide and double in width (neighbours merge) whenever more than
// kMaxBins would be needed, so a long run stays bounded.
class BandwidthBins {
 public:
  static constexpr uint64_t kFirstWidthPs = 100'000;
  static constexpr size_t kMaxBins = 4096;

  // `payload` bytes spread evenly over [start_ps, end_ps) (all in one bin when the span is
  // empty). Nothing for an empty payload.
  void add(uint64_t start_ps, uint64_t end_ps, uint64_t payload);

  uint64_t width_ps() const { return width_ps_; }
  const std::vector<double>& bytes() const { return bytes_; }  // per bin
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t busy_ps() const { return busy_ps_; }  // reserved time, summed

 private:
  uint64_t width_ps_ = kFirstWidthPs;
  std::vector<double> bytes_;
  uint64_t total_bytes_ = 0;
  uint64_t busy_ps_ = 0;
};

}  // namespace mtia::trace
