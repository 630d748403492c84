// Resident set size of this process, for the lazy-memory tests.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace test {

inline uint64_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      uint64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    std::getline(status, key);
  }
  return 0;
}

}  // namespace test
