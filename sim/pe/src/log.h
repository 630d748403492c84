// The PE model's logger ("sim.pe"), created once.
#pragma once

#include <memory>

#include <spdlog/spdlog.h>

namespace mtia::sim::pe::detail {

// Logs warnings and errors only unless MTIA_EMU_LOG_LEVEL names another level, like the
// other sim loggers.
std::shared_ptr<spdlog::logger> logger();

}  // namespace mtia::sim::pe::detail
