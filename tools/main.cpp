// mtia-emu: run workloads on the emulated MTIA device and inspect its presets.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "mtia/error.h"

namespace mtia::tools {

void DeviceFlags::add_to(CLI::App& cmd) {
  cmd.add_option("--preset", preset, "chip preset name (mtia-v1, mtia-v2) or path to a preset file")
      ->capture_default_str();
  cmd.add_option(
      "--set", overrides,
      "override a preset field, KEY=VALUE (repeatable; `mtia-emu info --config` lists the keys)");
  cmd.add_flag("--no-timing", no_timing, "functional only: simulated time stays zero");
}

DeviceOptions DeviceFlags::options() const {
  DeviceOptions o;
  o.preset = preset;
  o.overrides = overrides;
  o.timing = !no_timing;
  return o;
}

}  // namespace mtia::tools

int main(int argc, char** argv) {
  CLI::App app{"mtia-emu: an emulator of Meta's MTIA accelerator"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });
  mtia::tools::add_info_command(app);
  mtia::tools::add_demo_command(app);
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
