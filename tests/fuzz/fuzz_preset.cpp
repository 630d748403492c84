// Chip presets: a preset file's text, then override assignments ("key=value", one a line),
// as `--set` and MTIA_EMU_SET pass them. Bad input must end in a kInvalidArgument failure
// naming what is wrong; a configuration that validates must print as JSON (the trace and
// config.json do).
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz_check.h"
#include "mtia/sim/chip_config.h"

namespace sim = mtia::sim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  // The preset's text, a NUL, then the overrides.
  const size_t nul = input.find('\0');
  const std::string text = input.substr(0, nul);
  const std::string overrides = nul == std::string::npos ? "" : input.substr(nul + 1);

  sim::ChipConfig config;
  if (auto parsed = sim::parse_preset(text, "fuzz.json"); parsed) {
    config = parsed.value();
  } else {
    FUZZ_CHECK(parsed.error().code == mtia::isa::ErrorCode::kInvalidArgument);
    FUZZ_CHECK(parsed.error().reason.find("fuzz.json") != std::string::npos);
    // A preset that does not parse: overrides go onto a real one (read once).
    static const sim::ChipConfig shipped = sim::load_preset("mtia-v2").value();
    config = shipped;
  }
  std::istringstream lines(overrides);
  for (std::string line; std::getline(lines, line);) {
    if (const mtia::isa::Status applied = sim::apply_override(config, line); !applied) {
      FUZZ_CHECK(applied.error().code == mtia::isa::ErrorCode::kInvalidArgument);
      FUZZ_CHECK(!applied.error().reason.empty());
    }
  }
  if (!sim::validate(config)) return 0;
  FUZZ_CHECK(!sim::to_json(config).empty());
  return 0;
}
