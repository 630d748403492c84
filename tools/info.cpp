// `mtia-emu info`: open a device and print what it is, or the settings: the environment's
// table (settings/) and the command-line options, listed from their own definitions.
#include <cstdio>
#include <string>

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

// Markdown cells hold no line breaks or unescaped bars.
std::string cell(std::string text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') {
      out += "\\|";
    } else {
      out += c == '\n' ? ' ' : c;
    }
  }
  return out;
}

// Every option of the program, as CLI11 holds them (so the list cannot drift from the parser):
// the global options, then each command's. Help flags and positional arguments are left out.
std::string options_markdown(const CLI::App& root) {
  std::string out =
      "| command | option | takes | default | what it sets |\n|---|---|---|---|---|\n";
  auto add = [&](const CLI::App& app, const std::string& command) {
    for (const CLI::Option* o : app.get_options()) {
      if (!o->nonpositional() || o == app.get_help_ptr()) continue;
      std::string name;
      for (const std::string& l : o->get_lnames())
        name += (name.empty() ? "`--" : ", `--") + l + "`";
      for (const std::string& s : o->get_snames()) name += (name.empty() ? "`-" : ", `-") + s + "`";
      const std::string type = o->get_type_name();
      const std::string takes = type.empty() ? "a flag" : type;
      out += "| " + command + " | " + name + " | " + cell(takes) + " | " +
             cell(o->get_default_str()) + " | " + cell(o->get_description()) + " |\n";
    }
  };
  add(root, "`mtia-emu`");
  for (const CLI::App* sub : root.get_subcommands([](const CLI::App*) { return true; })) {
    add(*sub, "`" + sub->get_name() + "`");
    for (const CLI::App* nested : sub->get_subcommands([](const CLI::App*) { return true; })) {
      add(*nested, "`" + sub->get_name() + " " + nested->get_name() + "`");
    }
  }
  return out;
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
                "with --env: the variables and the command-line options as Markdown tables "
                "(docs/settings.md)")
      ->needs("--env");
  const CLI::App* root = &app;
  cmd->callback([flags, show_config, show_env, markdown, root] {
    if (*show_env) {
      if (*markdown) {
        const std::string text = settings::markdown() +
                                 "\n## Command-line options\n\nThe options of `mtia-emu`, "
                                 "listed from their definitions; an option wins over the "
                                 "variable it mirrors.\n\n" +
                                 options_markdown(*root);
        std::fputs(text.c_str(), stdout);
      } else {
        std::fputs(settings::describe_current().c_str(), stdout);
      }
      return;
    }
    Device device = Device::open(flags->options());
    print_properties(device.properties());
    if (*show_config) std::printf("\n%s\n", device.config_json().c_str());
  });
}

}  // namespace mtia::tools
