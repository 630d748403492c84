// `mtia-emu info`: open a device and print what it is.
#include <cstdio>

#include "commands.h"
#include "mtia/device.h"
#include "mtia/settings/settings.h"

namespace mtia::tools {
namespace {

double gib(uint64_t bytes) {
  return static_cast<double>(bytes) / (1ull << 30);
}
double mib(uint64_t bytes) {
  return static_cast<double>(bytes) / (1ull << 20);
}
double kib(uint64_t bytes) {
  return static_cast<double>(bytes) / (1ull << 10);
}

void print_properties(const DeviceProperties& p) {
  std::printf("device            %s (MTIA generation %u) via backend '%s'\n", p.name.c_str(),
              p.generation, p.backend.c_str());
  std::printf("firmware          %llu.%llu\n",
              static_cast<unsigned long long>(p.firmware_version >> 16),
              static_cast<unsigned long long>(p.firmware_version & 0xffff));
  std::printf("PE grid           %u x %u at %.3f GHz\n", p.pe_rows, p.pe_cols,
              static_cast<double>(p.clock_hz) / 1e9);
  std::printf("local store       %.0f KiB per PE\n", kib(p.local_store_bytes));
  std::printf("on-chip SRAM      %.0f MiB\n", mib(p.sram_bytes));
  std::printf("DRAM (LPDDR)      %.0f GiB\n", gib(p.dram_bytes));
  std::printf("DMA engines       %u\n", p.dma_engines);
  std::printf("hardware queues   %u\n", p.hardware_queues);
  std::printf("timing model      %s\n", p.timing ? "on" : "off (functional only)");
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "print the properties of an emulated device");
  auto flags = std::make_shared<DeviceFlags>();
  auto show_config = std::make_shared<bool>(false);
  auto show_env = std::make_shared<bool>(false);
  auto markdown = std::make_shared<bool>(false);
  flags->add_to(*cmd);
  cmd->add_flag("--config", *show_config,
                "also print the effective chip configuration (every overridable key)");
  cmd->add_flag("--env", *show_env,
                "print every MTIA_EMU_* environment variable instead: its value here and where it "
                "comes from (opens no device)");
  cmd->add_flag("--markdown", *markdown,
                "with --env: the table of variables in Markdown (docs/settings.md)")
      ->needs("--env");
  cmd->callback([flags, show_config, show_env, markdown] {
    if (*show_env) {
      const std::string text = *markdown ? settings::markdown() : settings::describe_current();
      std::fputs(text.c_str(), stdout);
      return;
    }
    Device device = Device::open(flags->options());
    print_properties(device.properties());
    if (*show_config) std::printf("\n%s\n", device.config_json().c_str());
  });
}

}  // namespace mtia::tools
