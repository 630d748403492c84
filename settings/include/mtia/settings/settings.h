#pragma once
// Every MTIA_EMU_* environment variable the emulator reads, in one table, and the one function
// that reads them. `mtia-emu info --env` prints the table with each value's origin, and
// docs/settings.md is generated from it (`mtia-emu info --env --markdown`).
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace mtia::settings {

struct Setting {
  std::string_view name;      // the environment variable
  std::string_view values;    // what it takes
  std::string_view fallback;  // what applies when it is unset or empty
  std::string_view also;      // the same setting as a command-line option or API field, if any
  std::string_view reader;    // the part of the emulator that reads it
  std::string_view meaning;
};

// The table, in the order docs/settings.md lists it.
std::span<const Setting> all();

// The entry for `name`, or nullptr when the table has none.
const Setting* find(std::string_view name);

// The variable's value, or nullopt when it is unset or empty. Reading a name the table lacks
// is a bug in the emulator (asserted): every variable is listed.
std::optional<std::string> read(std::string_view name);

// The table as a Markdown table (docs/settings.md), or as text with the current values and
// where each comes from (the environment, or the fallback).
std::string markdown();
std::string describe_current();

}  // namespace mtia::settings
