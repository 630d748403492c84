// The one place loggers come from. Every component logs through its own named logger
// ("sim.dma", "driver", "firmware", ...) made here, so they all write to stderr (stdout stays
// machine-readable for tools) and all honour MTIA_EMU_LOG_LEVEL.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace mtia::log {

// The logger called `name`, created on first use (thread-safe; later calls return the same
// one). Its level is the current level (see level()).
std::shared_ptr<spdlog::logger> get(const std::string& name);

// The level of every logger: set_level's if it was called, else MTIA_EMU_LOG_LEVEL's (trace,
// debug, info, warn, error, critical or off), else warn. An unknown MTIA_EMU_LOG_LEVEL is
// reported once on stderr and warn is used.
spdlog::level::level_enum level();

// Sets the level of every logger, those made so far and those made later (a program's
// --log-level). Overrides MTIA_EMU_LOG_LEVEL.
void set_level(spdlog::level::level_enum level);

// The level called `name` (as MTIA_EMU_LOG_LEVEL spells them), or nullopt-like false when
// `name` names none. Lets programs validate a --log-level before using it.
bool parse_level(std::string_view name, spdlog::level::level_enum& level);

}  // namespace mtia::log
