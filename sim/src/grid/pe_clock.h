// The PE clock of a launch: core cycles to simulated picoseconds and back. Private to sim/.
#pragma once

#include <cstdint>

namespace mtia::sim::detail {

struct PeClock {
  uint64_t clock_hz = 1'000'000'000;  // the PEs' core clock (ChipConfig::clock_hz), Hz
  bool timing = true;                 // false: the timing model is off, every time is 0

  static constexpr uint64_t kPsPerSecond = 1'000'000'000'000ull;

  // Picoseconds of `cycles` core cycles (rounded up; 0 with timing off).
  uint64_t cycles_to_ps(uint64_t cycles) const {
    if (!timing) return 0;
    const unsigned __int128 num = static_cast<unsigned __int128>(cycles) * kPsPerSecond;
    return static_cast<uint64_t>((num + clock_hz - 1) / clock_hz);
  }
  // Core cycles that cover `ps` picoseconds (rounded up).
  uint64_t ps_to_cycles(uint64_t ps) const {
    const unsigned __int128 num = static_cast<unsigned __int128>(ps) * clock_hz;
    return static_cast<uint64_t>((num + kPsPerSecond - 1) / kPsPerSecond);
  }
};

}  // namespace mtia::sim::detail
