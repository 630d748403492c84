// Host CPU time for the benchmarks' figures.
#pragma once

#include <ctime>

namespace mtia::bench {

// CPU seconds of the whole process (all its threads): unlike wall time it hardly grows when
// other processes load the machine, so it shows what an idle machine's wall time would be.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace mtia::bench
