// The mtia-emu subcommands. Each registers its options on the CLI11 app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "mtia/device_properties.h"

namespace mtia::tools {

// Options every subcommand that opens a device shares.
struct DeviceFlags {
  std::string preset = "mtia-v2";
  std::vector<std::string> overrides;
  bool no_timing = false;
  std::string trace;  // --trace LEVEL; empty: $MTIA_EMU_TRACE, else "kernels"

  void add_to(CLI::App& cmd);
  DeviceOptions options() const;
};

void add_info_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_trace_command(CLI::App& app);  // tools/trace.cpp
void add_run_command(CLI::App& app);    // tools/run.cpp
void add_serve_command(CLI::App& app);  // tools/serve.cpp

}  // namespace mtia::tools
