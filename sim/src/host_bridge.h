// The host side of the device as a SystemC module (Bridge): host requests off the inbox,
// register accesses as TLM-2.0 transactions into BAR0. Private to sim/.
#pragma once

#include <tlm_utils/simple_initiator_socket.h>
#include <systemc>
#include <tlm>

#include <cstdint>

#include "host_channel.h"
#include "register_file.h"
#include "sim_shared.h"

namespace mtia::sim::detail {

// The host side of the device: takes host requests off the inbox and performs them, register
// accesses as TLM transactions into the RegisterFile.
class Bridge : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Bridge> socket;

  Bridge(sc_core::sc_module_name name, SimShared& shared, HostChannel& channel, RegisterFile& regs);
  Json stats_json() const;

 private:
  void run();
  void handle(HostRequest& request);
  // With nothing else pending in the kernel, polls the inbox per the wait policy; true when a
  // request came (then the kernel never suspended).
  bool poll_inbox();

  SimShared& shared_;
  HostChannel& channel_;
  RegisterFile& regs_;
  // A request or the device going idle. Built once and owned here: the temporary list that
  // `a | b` allocates is freed only when the wait returns, and the last wait never does.
  sc_core::sc_event_or_list arrived_or_idle_;
  bool stopping_ = false;
  uint64_t reads_ = 0;
  uint64_t writes_ = 0;
  uint64_t rejected_ = 0;
  uint64_t calls_ = 0;
};

}  // namespace mtia::sim::detail
