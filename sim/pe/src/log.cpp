#include "log.h"

#include <cstdlib>
#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace mtia::sim::pe::detail {

std::shared_ptr<spdlog::logger> logger() {
  static std::mutex mu;
  static std::shared_ptr<spdlog::logger> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (cached) return cached;
  cached = spdlog::get("sim.pe");
  if (!cached) {
    // stderr, so that tools printing results on stdout stay machine-readable.
    cached = spdlog::stderr_color_mt("sim.pe");
    spdlog::level::level_enum level = spdlog::level::warn;
    if (const char* env = std::getenv("MTIA_EMU_LOG_LEVEL"); env != nullptr && env[0] != '\0') {
      level = spdlog::level::from_str(env);
    }
    cached->set_level(level);
  }
  return cached;
}

}  // namespace mtia::sim::pe::detail
