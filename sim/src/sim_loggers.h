// The simulator's loggers: one per component ("sim.dma", "sim.cp", ...), from mtia/log.
#pragma once

#include <memory>
#include <string>

#include "mtia/log/logger.h"

namespace mtia::sim::detail {

inline std::shared_ptr<spdlog::logger> logger(const std::string& name) {
  return mtia::log::get(name);
}

}  // namespace mtia::sim::detail
