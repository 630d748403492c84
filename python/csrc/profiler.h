// torch.profiler on the emulated device: a Kineto activity profiler (libkineto's
// IActivityProfiler) that turns the host API's activity records (mtia/activity.h) into Kineto
// activities - the device's work as MTIA_CCP_EVENTS in simulated durations on a row per device
// and stream, and the host API's calls as MTIA_RUNTIME - each linked to the operator that
// issued it (docs/profiling.md).
#pragma once

#include <cstdint>
#include <string>

namespace mtia {
class Device;
}

namespace mtia::torch_backend {

// Registers the activity profiler with Kineto (once; what the module's import does).
void register_profiler();

// Called by the runtime when it opens a device: a profile in progress observes it too.
void profiler_device_opened(mtia::Device& device);

// Waits for the work of every open device, as the profiler does before it stops; returns the
// first device error it met ("" when none), so that the profile always ends. Devices that were
// never opened, or closed by shutdown(), are skipped.
std::string synchronize_open_devices();

// For tests and diagnostics: whether a profiling session records now, and how many device
// activities and runtime calls the latest session collected.
struct ProfilerCounts {
  bool recording = false;
  uint64_t device_activities = 0;
  uint64_t runtime_calls = 0;
  uint64_t dropped = 0;
};
ProfilerCounts profiler_counts();

}  // namespace mtia::torch_backend
