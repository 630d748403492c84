// The PE grid's parameters reach the device from DeviceOptions (the host's: unit_threads,
// inline_work_ns, lazy_loads) and from the preset and its overrides (the scheduler's:
// pe_quantum_cycles, pe_slice_cycles, pe_watchdog_cycles, kernel_image_max_bytes); an option
// beats its environment variable, which only overrides the default.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "device_helpers.h"
#include "mtia/runtime.h"

using namespace mtia;
using mtia::test::download;
using mtia::test::expect_error;
using mtia::test::file_bytes;
using mtia::test::upload;

namespace {

// The statistics of the device's PE grid.
nlohmann::json grid_stats(Device& dev) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mtia_grid_options_test_" + std::to_string(::getpid()));
  dev.write_artifacts(dir.string());
  std::ifstream in(dir / "stats.json");
  REQUIRE(in);
  const auto stats = nlohmann::json::parse(in);
  std::filesystem::remove_all(dir);
  return stats["pe_grid"];
}

// Loads of the lazy-load kernel that sums 1024 loaded words on one PE, left in device memory.
uint64_t lazy_loads_of_one_sum(Device& dev) {
  const std::vector<uint8_t> elf = file_bytes(MTIA_LAZY_LOAD_KERNELS_ELF);
  KernelModule module = dev.load_module(elf.data(), elf.size());
  std::vector<int32_t> in(1024, 3);
  DevicePtr din = upload(dev, in);
  DevicePtr dout = dev.malloc(4096);
  const uint64_t before = grid_stats(dev)["lazy_loads"]["value"].get<uint64_t>();
  dev.launch(module.kernel("lazy_core_sum"), Grid{1, 1}, {dout, din});
  CHECK(download<int32_t>(dev, dout, 1)[0] == 3 * 1024);
  return grid_stats(dev)["lazy_loads"]["value"].get<uint64_t>() - before;
}

}  // namespace

TEST_CASE("DeviceOptions::lazy_loads beats $MTIA_EMU_LAZY_LOADS, which beats the default",
          "[grid][options]") {
  DeviceOptions options;
  options.preset = "mtia-v1";
  SECTION("default: on") {
    ::unsetenv("MTIA_EMU_LAZY_LOADS");
    Device dev = Device::open(options);
    CHECK(lazy_loads_of_one_sum(dev) > 0);
  }
  SECTION("the environment turns it off") {
    ::setenv("MTIA_EMU_LAZY_LOADS", "0", 1);
    Device dev = Device::open(options);
    CHECK(lazy_loads_of_one_sum(dev) == 0);
  }
  SECTION("the option turns it back on") {
    ::setenv("MTIA_EMU_LAZY_LOADS", "0", 1);
    options.lazy_loads = true;
    Device dev = Device::open(options);
    CHECK(lazy_loads_of_one_sum(dev) > 0);
  }
  SECTION("the option turns it off") {
    ::unsetenv("MTIA_EMU_LAZY_LOADS");
    options.lazy_loads = false;
    options.unit_threads = 0;
    options.inline_work_ns = 0;
    Device dev = Device::open(options);
    CHECK(lazy_loads_of_one_sum(dev) == 0);
  }
  ::unsetenv("MTIA_EMU_LAZY_LOADS");
}

TEST_CASE("a host option out of range is an invalid argument", "[grid][options]") {
  DeviceOptions options;
  options.unit_threads = 1000;
  expect_error(ErrorKind::kInvalidArgument, "unit_threads is 1000", [&] { Device::open(options); });
  options.unit_threads.reset();
  options.overrides = {"pe_slice_cycles=0"};
  expect_error(ErrorKind::kInvalidArgument, "pe_slice_cycles is 0", [&] { Device::open(options); });
}

TEST_CASE("the preset's scheduler fields reach the grid through the overrides", "[grid][options]") {
  const std::vector<uint8_t> elf = file_bytes(MTIA_FAULT_KERNELS_ELF);
  SECTION("pe_watchdog_cycles: a launch that gives no limit gets the preset's") {
    DeviceOptions options;
    options.overrides = {"pe_watchdog_cycles=30000"};
    Device dev = Device::open(options);
    KernelModule faults = dev.load_module(elf.data(), elf.size());
    Stream s = dev.create_stream();
    dev.launch(faults.kernel("spin_forever"), Grid{1, 1}, {int64_t{0}}, s);
    expect_error(ErrorKind::kDeviceFault, "watchdog limit of 30000 cycles",
                 [&] { dev.synchronize(s); });
  }
  SECTION("pe_quantum_cycles: a smaller quantum syncs SystemC more often") {
    auto syncs = [&](const std::string& quantum) {
      DeviceOptions options;
      options.overrides = {"pe_quantum_cycles=" + quantum, "pe_slice_cycles=100"};
      Device dev = Device::open(options);
      KernelModule faults = dev.load_module(elf.data(), elf.size());
      Stream s = dev.create_stream();
      dev.launch(faults.kernel("spin_forever"), Grid{1, 1}, {int64_t{0}}, s, 200'000);
      try {
        dev.synchronize(s);
      } catch (const Error&) {  // the watchdog, as intended
      }
      return grid_stats(dev)["systemc_syncs"]["value"].get<uint64_t>();
    };
    const uint64_t coarse = syncs("100000"), fine = syncs("1000");
    INFO("syncs with a 100000-cycle quantum " << coarse << ", with a 1000-cycle one " << fine);
    CHECK(coarse <= 3);
    CHECK(fine >= 150);
  }
}
