// The record of one host API call for the device's trace. The host API fills it in when the
// call returns and hands it, moved, through the driver's backend to the device's trace sink.
//
// Host clock: a host thread cannot see simulated time advance except through completions it
// waits for, so its calls are stamped with the latest simulated time that thread has observed
// (the end time of every packet it waited for; 0 at first). That places the call no later than
// the device work it causes, and is the same on every run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtia::trace {

// A packet a host API call submitted.
struct HostPacket {
  uint32_t queue = 0;
  uint64_t seq = 0;        // the driver's sequence number (echoed by the completion record)
  uint64_t submit_ps = 0;  // host clock at the doorbell, simulated picoseconds
  std::string label;       // launches: the kernel's name; otherwise what the packet does
};

struct HostCall {
  uint32_t thread = 0;       // host thread number: 1 for the first thread that made a call
  uint64_t order = 0;        // calls are numbered as they start (orders calls at equal times)
  std::string name;          // the API function, e.g. "launch", "copy_async", "synchronize"
  std::string detail;        // e.g. "matmul on 8x8 PEs", "host to device, 4096 bytes"
  uint64_t start_ps = 0;     // host clock at entry, simulated picoseconds
  uint64_t end_ps = 0;       // host clock at return (later if the call waited for the device)
  double wall_start_us = 0;  // host wall clock since the device opened, us (varies run to run)
  double wall_us = 0;        // host wall time the call took, us (varies run to run)
  std::string error;         // what the call threw, if it threw
  std::vector<HostPacket> packets;
};

}  // namespace mtia::trace
