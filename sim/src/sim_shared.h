// What the SystemC modules of one device share (owned by Device::Impl), the helpers they all
// use, and the statistics format they report in. Private to sim/.
#pragma once

#include <systemc>

#include <atomic>
#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "device_tracer.h"
#include "host_channel.h"
#include "initcheck.h"
#include "memcheck.h"
#include "mtia/host/wait.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/emulated_device.h"
#include "mtia/sim/grid_options.h"
#include "mtia/sim/memory_system.h"

namespace mtia::sim::detail {

using Json = nlohmann::ordered_json;

// Adds {"value", "unit", "description"} under `key`.
void add_stat(Json& module, const char* key, Json value, const char* unit, const char* description);

// Coroutine stacks for the modules' SC_THREADs. The firmware formats messages and the interrupt
// handler runs user code on them, and sanitizer builds need several times the usual stack.
constexpr size_t kThreadStackBytes = 1 << 20;

inline sc_core::sc_time ps(uint64_t picoseconds) {
  return sc_core::sc_time::from_value(picoseconds);
}

// Everything the modules share with the Device (owned by Device::Impl).
struct SimShared {
  ChipConfig config;
  std::unique_ptr<MemorySystem> memory;
  InterruptHandler on_interrupt;
  std::atomic<uint64_t> now_ps{0};
  HostInbox inbox;
  std::unique_ptr<Tracer> tracer;
  // How the simulator thread waits for host requests and host threads for its answers.
  host::WaitPolicy wait = host::WaitPolicy::kAuto;
  // How the PE grid uses the host (threads, hand-off threshold, lazy loads).
  PeGridHostSettings grid_host;
  // The sanitizer's checks (isa/sanitize.h SanitizeCheck bits), 0 unless the driver switches
  // them on, the allocation table of memcheck and initcheck (memcheck.h), and initcheck's
  // record of the device bytes written (initcheck.h).
  uint64_t sanitize = 0;
  Memcheck memcheck;
  Initcheck initcheck;

  // Publishes the simulator's current time to host threads (simulator thread only).
  void sync_time();
};

}  // namespace mtia::sim::detail
