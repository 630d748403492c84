// The PE grid's parameters: the scheduler's in the preset (optional fields, key=value
// overrides), the host's in options, with the environment variables as overrides of the
// defaults only (sim/grid_options.h). Precedence: an option, else the environment, else the
// default; for the preset fields: an override, else the preset file, else the default.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "mtia/sim/chip_config.h"
#include "mtia/sim/grid_options.h"
#include "must.h"
#include "scoped_env.h"

using mtia::test::must;

using mtia::sim::apply_override;
using mtia::sim::ChipConfig;
using mtia::sim::load_preset;
using mtia::sim::PeGridHostOptions;
using mtia::sim::resolve;

namespace {

using mtia::test::ScopedEnv;

// The mtia-v2 preset written without the given fields, as a preset from before they existed.
std::filesystem::path preset_without(const std::vector<std::string>& fields) {
  std::ifstream in(std::filesystem::path(MTIA_PRESET_DIR) / "mtia-v2.json");
  REQUIRE(in);
  nlohmann::json doc = nlohmann::json::parse(in);
  for (const auto& f : fields) doc.erase(f);
  const auto path = std::filesystem::temp_directory_path() /
                    ("mtia_grid_options_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << doc.dump(2);
  return path;
}

}  // namespace

TEST_CASE("grid host options: an option, else the environment, else the default",
          "[config][grid]") {
  ScopedEnv threads("MTIA_EMU_UNIT_THREADS", nullptr);
  ScopedEnv inline_ns("MTIA_EMU_INLINE_WORK_NS", nullptr);
  ScopedEnv lazy("MTIA_EMU_LAZY_LOADS", nullptr);
  const unsigned cores = std::thread::hardware_concurrency();

  // Host cores - 1 helpers (at most 6), 5 us, lazy loads on.
  const auto d = must(resolve({}));
  CHECK(d.unit_threads == (cores > 1 ? std::min(cores - 1, 6u) : 0));
  CHECK(d.inline_work_ns == 5'000);
  CHECK(d.lazy_loads);

  // The environment overrides the defaults...
  ::setenv("MTIA_EMU_UNIT_THREADS", "3", 1);
  ::setenv("MTIA_EMU_INLINE_WORK_NS", "0", 1);
  ::setenv("MTIA_EMU_LAZY_LOADS", "0", 1);
  const auto e = must(resolve({}));
  CHECK(e.unit_threads == 3);
  CHECK(e.inline_work_ns == 0);
  CHECK_FALSE(e.lazy_loads);

  // ... and the options override the environment.
  PeGridHostOptions o;
  o.unit_threads = 0;
  o.inline_work_ns = 20'000;
  o.lazy_loads = true;
  const auto r = must(resolve(o));
  CHECK(r.unit_threads == 0);
  CHECK(r.inline_work_ns == 20'000);
  CHECK(r.lazy_loads);

  // A field left unset still comes from the environment.
  PeGridHostOptions only_threads;
  only_threads.unit_threads = 7;
  const auto mixed = must(resolve(only_threads));
  CHECK(mixed.unit_threads == 7);
  CHECK(mixed.inline_work_ns == 0);
  CHECK_FALSE(mixed.lazy_loads);
}

TEST_CASE("grid host options: bad values", "[config][grid]") {
  // An environment value that is not a number in range is ignored (with a warning).
  ScopedEnv threads("MTIA_EMU_UNIT_THREADS", "lots");
  ScopedEnv inline_ns("MTIA_EMU_INLINE_WORK_NS", "-5");
  ScopedEnv lazy("MTIA_EMU_LAZY_LOADS", "2");
  const unsigned cores = std::thread::hardware_concurrency();
  const auto r = must(resolve({}));
  CHECK(r.unit_threads == (cores > 1 ? std::min(cores - 1, 6u) : 0));
  CHECK(r.inline_work_ns == 5'000);
  CHECK(r.lazy_loads);

  // An option out of range is the caller's error.
  PeGridHostOptions o;
  o.unit_threads = 257;
  CHECK_THAT(mtia::test::failure(resolve(o)).reason, Catch::Contains("unit_threads is 257"));
  o.unit_threads.reset();
  o.inline_work_ns = 1'000'000'001;
  CHECK_THAT(mtia::test::failure(resolve(o)).reason, Catch::Contains("inline_work_ns"));
}

TEST_CASE("grid scheduler fields: an override, else the preset, else the default",
          "[config][grid]") {
  // The shipped presets give them.
  const ChipConfig v2 = must(load_preset("mtia-v2"));
  CHECK(v2.pe_quantum_cycles == 10'000);
  CHECK(v2.pe_slice_cycles == 256);
  CHECK(v2.pe_watchdog_cycles == 1'000'000'000);
  CHECK(v2.kernel_image_max_bytes == 16u << 20);

  // A preset from before these fields existed still loads, with the defaults.
  const auto old = preset_without(
      {"pe_quantum_cycles", "pe_slice_cycles", "pe_watchdog_cycles", "kernel_image_max_bytes"});
  ChipConfig c = must(load_preset(old.string()));
  CHECK(c.pe_quantum_cycles == ChipConfig{}.pe_quantum_cycles);
  CHECK(c.pe_slice_cycles == ChipConfig{}.pe_slice_cycles);
  CHECK(c.pe_watchdog_cycles == ChipConfig{}.pe_watchdog_cycles);
  CHECK(c.kernel_image_max_bytes == ChipConfig{}.kernel_image_max_bytes);
  // ... but a required field still may not be left out.
  const auto broken = preset_without({"dma_engines"});
  CHECK_THAT(mtia::test::failure(load_preset(broken.string())).reason,
             Catch::Contains("lacks field 'dma_engines'"));
  std::filesystem::remove(old);
  std::filesystem::remove(broken);

  // A preset's value, and an override over it.
  std::ifstream in(std::filesystem::path(MTIA_PRESET_DIR) / "mtia-v1.json");
  nlohmann::json doc = nlohmann::json::parse(in);
  doc["pe_slice_cycles"]["value"] = 128;
  const ChipConfig custom = must(mtia::sim::parse_preset(doc.dump(), "custom.json"));
  CHECK(custom.pe_slice_cycles == 128);
  ChipConfig over = custom;
  must(apply_override(over, "pe_slice_cycles=64"));
  must(apply_override(over, "pe_watchdog_cycles=20000"));
  CHECK(over.pe_slice_cycles == 64);
  CHECK(over.pe_watchdog_cycles == 20'000);
  // The effective configuration names them, with their units.
  const auto written = nlohmann::json::parse(mtia::sim::to_json(over));
  CHECK(written["pe_slice_cycles"]["value"] == 64);
  CHECK(written["pe_quantum_cycles"]["unit"] == "cycles");
  CHECK(written["kernel_image_max_bytes"]["unit"] == "bytes");
}

TEST_CASE("grid scheduler fields: bad values are rejected", "[config][grid]") {
  struct Case {
    std::string assignment, expect;
  };
  const Case cases[] = {
      {"pe_quantum_cycles=0", "pe_quantum_cycles is 0"},
      {"pe_slice_cycles=0", "pe_slice_cycles is 0"},
      {"pe_slice_cycles=20000", "must be 1..pe_quantum_cycles (10000)"},
      {"pe_watchdog_cycles=0", "pe_watchdog_cycles is 0"},
      {"kernel_image_max_bytes=10", "kernel_image_max_bytes is 10"},
  };
  for (const Case& tc : cases) {
    INFO(tc.assignment);
    ChipConfig c = must(load_preset("mtia-v2"));
    must(apply_override(c, tc.assignment));
    CHECK_THAT(mtia::test::failure(mtia::sim::validate(c)).reason, Catch::Contains(tc.expect));
  }
  ChipConfig c = must(load_preset("mtia-v2"));
  CHECK_THAT(mtia::test::failure(apply_override(c, "pe_slice_cycles=-1")).reason,
             Catch::Contains("expects an unsigned integer (cycles)"));
}
