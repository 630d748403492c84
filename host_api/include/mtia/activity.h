// Activity records: what a profiler needs to put a device's work on a timeline.
//
// While an observer is installed on a Device (set_activity_observer), the host API reports
//  * each of its public calls (launch, copy, fill, synchronize, malloc, ...) when it returns,
//    with its host wall-clock start and end (RuntimeCall), and
//  * each packet of device work it queued (a kernel launch, a DMA copy piece, a fill, a graph
//    replay, a link transfer) when the device completes it, with the simulated start and end
//    the device wrote in its completion record - the same times the device's own trace uses -
//    and the host wall-clock time at which it was submitted (DeviceActivity).
// A packet carries the id of the outermost public call that queued it (`call`) and the calling
// thread's activity tag at submission (`tag`: set_activity_tag, e.g. a profiler's correlation
// id of the operator that issued the work). Fences and waits that the runtime queues for
// events and streams are not reported.
//
// The observer runs on the backend's completion thread (device activities) or on the calling
// thread (runtime calls): it must be quick, must not throw, and must not call into the Device.
// Work submitted while an observer is installed is reported to that observer even if it is
// replaced or removed before the work completes. With no observer installed the cost is one
// atomic load per call and per packet.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "mtia/device.h"

namespace mtia {

// Host wall-clock time: nanoseconds since the Unix epoch (std::chrono::system_clock).
inline int64_t wall_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

enum class ActivityKind : uint8_t {
  kLaunch,  // a kernel launch; name: the kernel's
  kCopy,    // a DMA copy piece; name: "copy host to device", "... device to host", "... device to
            // device"
  kFill,    // a fill or memset
  kGraph,   // a graph replay (one packet running a command buffer)
  kLink,    // an inter-chip link transfer
};

const char* activity_kind_name(ActivityKind kind);

struct DeviceActivity {
  ActivityKind kind = ActivityKind::kLaunch;
  uint32_t device = 0;    // Device::index()
  uint32_t stream = 0;    // Stream::id
  uint32_t queue = 0;     // the hardware queue it ran on
  uint64_t seq = 0;       // the packet's sequence number on its queue
  uint64_t call = 0;      // id of the public call that queued it (RuntimeCall::id), 0 if none
  uint64_t tag = 0;       // the submitting thread's activity tag
  int64_t submit_ns = 0;  // host wall clock at submission (wall_clock_ns)
  uint64_t start_ps = 0;  // simulated start and end (the completion record's)
  uint64_t end_ps = 0;
  uint64_t bytes = 0;  // bytes moved or written (copies, fills, link transfers)
  bool ok = true;      // false: it failed or never ran (aborted after an earlier failure)
  std::string name;
};

struct RuntimeCall {
  uint64_t id = 0;       // unique within the process, > 0
  uint32_t device = 0;   // Device::index()
  uint64_t tag = 0;      // the calling thread's activity tag when the call began
  int64_t start_ns = 0;  // host wall clock (wall_clock_ns)
  int64_t end_ns = 0;
  const char* name = "";  // the call: "launch", "copy", "synchronize", ... (static storage)
  std::string label;      // what it ran: the kernel's name, "copy host to device", ...
  bool threw = false;
};

class ActivityObserver {
 public:
  virtual ~ActivityObserver() = default;
  // A packet was queued; its on_device_activity follows when it completes (possibly before
  // this call returns, on the completion thread).
  virtual void on_device_submitted() noexcept {}
  virtual void on_device_activity(const DeviceActivity& activity) noexcept = 0;
  virtual void on_runtime_call(const RuntimeCall& call) noexcept = 0;
};

// Installs `observer` on `device` (null removes it). The device keeps it alive while work
// submitted under it is still to complete.
void set_activity_observer(Device& device, std::shared_ptr<ActivityObserver> observer);

// The calling thread's activity tag, stamped on the calls and packets it issues (0: none).
void set_activity_tag(uint64_t tag);
uint64_t activity_tag();

}  // namespace mtia
