// mtia-emu: run workloads on the emulated MTIA device and inspect its presets.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "commands.h"
#include "mtia/error.h"
#include "mtia/log/logger.h"
#include "mtia/settings/settings.h"

namespace mtia::tools {

void DeviceFlags::add_to(CLI::App& cmd) {
  cmd.add_option("--preset", preset, "chip preset name (mtia-v1, mtia-v2) or path to a preset file")
      ->capture_default_str();
  cmd.add_option(
      "--set", overrides,
      "override a preset field, KEY=VALUE (repeatable; `mtia-emu info --config` lists the keys)");
  cmd.add_flag("--no-timing", no_timing, "functional only: simulated time stays zero");
  cmd.add_option("--trace", trace,
                 "performance trace: off, kernels (packets, copies, launches; the default) or "
                 "units (every PE unit operation too); default $MTIA_EMU_TRACE if set")
      ->check(CLI::IsMember({"off", "kernels", "units"}));
}

DeviceOptions DeviceFlags::options() const {
  DeviceOptions o;
  o.preset = preset;
  o.overrides = overrides;
  o.timing = !no_timing;
  // Commands that run work trace kernels unless told otherwise (the library's default is off).
  if (!trace.empty()) {
    o.trace = parse_trace_level(trace);
  } else if (!settings::read("MTIA_EMU_TRACE")) {
    o.trace = TraceLevel::kKernels;
  }
  return o;
}

}  // namespace mtia::tools

int main(int argc, char** argv) {
  CLI::App app{"mtia-emu: an emulator of Meta's MTIA accelerator"};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error or off (default: $MTIA_EMU_LOG_LEVEL, else warn)")
      ->check([](const std::string& name) {
        spdlog::level::level_enum level;
        return mtia::log::parse_level(name, level)
                   ? std::string()
                   : "not a level: use trace, debug, info, warn, error or off";
      });
  app.parse_complete_callback([&] {
    spdlog::level::level_enum level;
    if (!log_level.empty() && mtia::log::parse_level(log_level, level)) mtia::log::set_level(level);
  });
  mtia::tools::add_info_command(app);
  mtia::tools::add_demo_command(app);
  mtia::tools::add_trace_command(app);
  mtia::tools::add_run_command(app);
  mtia::tools::add_serve_command(app);
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const mtia::Error& e) {
    std::fprintf(stderr, "mtia-emu: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mtia-emu: %s\n", e.what());
    return 1;
  }
  return 0;
}
