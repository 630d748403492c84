// The PE model's logger ("sim.pe"), from mtia/log.
#pragma once

#include <memory>

#include "mtia/log/logger.h"

namespace mtia::sim::pe::detail {

inline std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> log = mtia::log::get("sim.pe");
  return log;
}

}  // namespace mtia::sim::pe::detail
