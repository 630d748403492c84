// One named spdlog logger per component ("sim.dma", "sim.cp", ...), created once.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace mtia::sim::detail {

// The logger called `name`, created on first use (thread-safe). New loggers log warnings and
// errors only unless MTIA_EMU_LOG_LEVEL names another level (trace, debug, info, ...).
std::shared_ptr<spdlog::logger> logger(const std::string& name);

}  // namespace mtia::sim::detail
