#include "mtia/trace/bandwidth.h"

#include <algorithm>

namespace mtia::trace {

void BandwidthBins::add(uint64_t start_ps, uint64_t end_ps, uint64_t payload) {
  if (payload == 0) return;
  total_bytes_ += payload;
  busy_ps_ += end_ps - start_ps;
  const uint64_t last = std::max(start_ps, end_ps == start_ps ? end_ps : end_ps - 1);
  while (last / width_ps_ >= kMaxBins) {
    // Too many bins: halve their number (pairs merge).
    std::vector<double> merged((bytes_.size() + 1) / 2, 0.0);
    for (size_t i = 0; i < bytes_.size(); ++i) merged[i / 2] += bytes_[i];
    bytes_.swap(merged);
    width_ps_ *= 2;
  }
  if (bytes_.size() <= last / width_ps_) bytes_.resize(last / width_ps_ + 1, 0.0);
  if (end_ps <= start_ps) {
    bytes_[start_ps / width_ps_] += static_cast<double>(payload);
    return;
  }
  const double per_ps = static_cast<double>(payload) / static_cast<double>(end_ps - start_ps);
  for (uint64_t b = start_ps / width_ps_; b * width_ps_ < end_ps; ++b) {
    const uint64_t lo = std::max(start_ps, b * width_ps_);
    const uint64_t hi = std::min(end_ps, (b + 1) * width_ps_);
    bytes_[b] += per_ps * static_cast<double>(hi - lo);
  }
}

}  // namespace mtia::trace
