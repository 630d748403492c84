// BAR0 as a SystemC module: the TLM-2.0 target in front of the firmware's registers. Private
// to sim/.
#pragma once

// The Debian libsystemc is built as C++17 and its API-version check symbol names the standard;
// sim/CMakeLists.txt defines SC_CPLUSPLUS=201703L so this C++20 code links against it.
#include <tlm_utils/simple_target_socket.h>
#include <systemc>
#include <tlm>

#include <cstdint>

#include "command_processor_module.h"
#include "mtia/isa/result.h"
#include "sim_shared.h"

namespace mtia::sim::detail {

// BAR0 as a TLM-2.0 target: forwards 8-byte accesses to the firmware's registers and answers
// TLM_ADDRESS_ERROR_RESPONSE when the firmware rejects one.
class RegisterFile : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<RegisterFile> socket;

  RegisterFile(sc_core::sc_module_name name, CommandProcessorModule& cp);
  // Why the most recent access was rejected (valid right after an error response).
  const isa::Failure& last_rejection() const { return last_rejection_; }
  Json stats_json() const;

 private:
  void b_transport(tlm::tlm_generic_payload& payload, sc_core::sc_time& delay);

  CommandProcessorModule& cp_;
  isa::Failure last_rejection_;
  uint64_t reads_ = 0;
  uint64_t writes_ = 0;
  uint64_t rejected_ = 0;
};

}  // namespace mtia::sim::detail
