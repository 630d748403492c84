// The device shared among a server's clients, as PCIe virtual functions share one: each
// client slot owns a run of hardware queues, a context and a DRAM window, and reaches the
// registers through a view of its own (its queues numbered from 0; the fields that set a
// queue's context and window are the server's). Private to server/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mtia/driver/backend.h"
#include "mtia/isa/access_scope.h"
#include "mtia/isa/result.h"

namespace mtia::server {

struct Session;

// One client's share of the device, as a PCIe virtual function is: a run of hardware queues, a
// context for its host memory and a DRAM window with a memory file of its own. The queues'
// access scope is programmed once, at start; the client cannot change it (its writes to those
// registers are dropped), so its packets and kernels reach only its window and its mappings.
struct Slot {
  uint32_t index = 0;
  uint32_t first_queue = 0;  // hardware queues [first_queue, first_queue + queues)
  uint32_t queues = 0;
  isa::AccessScope scope;                // context index + 1, and the window
  driver::Backend::SharedWindow window;  // the window's memory file (the device's)
  Session* holder = nullptr;
  uint64_t int_enable = 0;  // the client's kIntEnable, in its own queue numbers
  uint64_t mask() const { return queues >= 64 ? ~uint64_t{0} : (uint64_t{1} << queues) - 1; }
};

class ClientSlots {
 public:
  // `lost` is the server's reason the device was lost ("" while it works): once it is set,
  // no register is written any more.
  explicit ClientSlots(const std::string& lost) : lost_(lost) {}

  // Gives `clients` slots their queues, context and window on `device`, which outlives this
  // (ServerOptions::clients).
  isa::Status partition(driver::Backend& device, uint32_t clients);
  std::vector<Slot>& slots() { return slots_; }

  // A client's register read and (posted) write, in its own queue numbers. A write the client
  // may not make is dropped and logged with its client id.
  isa::Result<uint64_t> read_register(const Slot& slot, uint64_t offset);
  void write_register(Slot& slot, uint64_t client, uint64_t offset, uint64_t value);
  // The device's interrupt enables: each client's, at its queues' bits.
  void write_int_enable();
  // Stops a client's queues at once: queued and waiting packets are dropped.
  void reset_queues(const Slot& slot);
  // The client wrote [addr, + bytes) through its mapping of its window: tells the device, for
  // the sanitizer's initcheck (as the allocation table, offered to a server's only client).
  void note_written(const Slot& slot, uint64_t client, uint64_t addr, uint64_t bytes);
  // Switches the sanitizer off, forgetting the allocation table and what was written, between
  // two clients of a one-client server (the only one the sanitizer is offered to).
  void stop_sanitizer();
  // The next client of a window finds it zeroed, and the memory goes back to the host.
  static void clear_window(const Slot& slot);
  // Device memory a client's window holds now: the pages of its memory file, bytes.
  static uint64_t resident_bytes(const Slot& slot);
  // Whether a client's memory-window access stays in its window.
  static isa::Status check_window(const Slot& slot, const char* what, uint64_t addr,
                                  uint64_t bytes);

 private:
  const std::string& lost_;
  driver::Backend* device_ = nullptr;
  std::vector<Slot> slots_;
};

}  // namespace mtia::server
