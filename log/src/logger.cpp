#include "mtia/log/logger.h"

#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "mtia/settings/settings.h"

namespace mtia::log {
namespace {

struct Registry {
  std::mutex mu;
  bool level_known = false;
  spdlog::level::level_enum level = spdlog::level::warn;
  std::vector<std::shared_ptr<spdlog::logger>> made;
};

Registry& registry() {
  static Registry r;  // never destroyed before the loggers' last users: function-local static
  return r;
}

// The level from the environment; called once, under the registry's lock.
spdlog::level::level_enum level_from_environment() {
  const std::optional<std::string> env = settings::read("MTIA_EMU_LOG_LEVEL");
  if (!env) return spdlog::level::warn;
  spdlog::level::level_enum level;
  if (parse_level(*env, level)) return level;
  std::fprintf(stderr,
               "mtia-emu: MTIA_EMU_LOG_LEVEL=%s is not a level (trace, debug, info, warn, error, "
               "critical, off); logging warnings and errors\n",
               env->c_str());
  return spdlog::level::warn;
}

spdlog::level::level_enum current_level(Registry& r) {
  if (!r.level_known) {
    r.level = level_from_environment();
    r.level_known = true;
  }
  return r.level;
}

}  // namespace

bool parse_level(std::string_view name, spdlog::level::level_enum& level) {
  // spdlog's from_str answers `off` for a name it does not know, which would silence logging
  // by a typo; only exact names count here.
  for (int i = 0; i < spdlog::level::n_levels; ++i) {
    auto candidate = static_cast<spdlog::level::level_enum>(i);
    auto text = spdlog::level::to_string_view(candidate);
    if (name == std::string_view(text.data(), text.size())) {
      level = candidate;
      return true;
    }
  }
  if (name == "warning") {
    level = spdlog::level::warn;
    return true;
  }
  return false;
}

std::shared_ptr<spdlog::logger> get(const std::string& name) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (const auto& logger : r.made) {
    if (logger->name() == name) return logger;
  }
  // Not registered with spdlog's global registry: names stay ours even where a program (or
  // PyTorch) has its own spdlog loggers.
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(name, std::move(sink));
  logger->set_level(current_level(r));
  r.made.push_back(logger);
  return logger;
}

spdlog::level::level_enum level() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return current_level(r);
}

void set_level(spdlog::level::level_enum level) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.level = level;
  r.level_known = true;
  for (const auto& logger : r.made) logger->set_level(level);
}

}  // namespace mtia::log
