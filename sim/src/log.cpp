#include "log.h"

#include <cstdlib>
#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace mtia::sim::detail {

std::shared_ptr<spdlog::logger> logger(const std::string& name) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (auto existing = spdlog::get(name)) return existing;
  // stderr, so that tools printing results on stdout stay machine-readable.
  auto created = spdlog::stderr_color_mt(name);
  spdlog::level::level_enum level = spdlog::level::warn;
  if (const char* env = std::getenv("MTIA_EMU_LOG_LEVEL"); env != nullptr && env[0] != '\0') {
    level = spdlog::level::from_str(env);
  }
  created->set_level(level);
  return created;
}

}  // namespace mtia::sim::detail
