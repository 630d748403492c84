// The SystemC model of one device, and how its modules connect. Private to sim/: SystemC never
// appears in public headers. Each module has its file (host_channel, host_bridge, register_file,
// command_processor_module, dma_engine, grid/pe_grid).
//
//   host threads --(HostInbox + HostChannel: async_request_update)--> Bridge (SC_THREAD)
//   Bridge --TLM-2.0 b_transport--> RegisterFile (BAR0, TLM target) --> firmware registers
//   CommandProcessorModule (SC_THREAD running firmware::CommandProcessor, implements Platform)
//   DmaEngine x N (SC_THREADs executing N-D jobs through the MemorySystem's timing model)
//   PeGrid (one SC_THREAD running kernel launches on the PE cores; see grid/pe_grid.h)
//
// Every SystemC object lives on the simulator thread. The only cross-thread state is the
// HostInbox (mutex), the atomic clock view and device memory contents (ordered by doorbells).
#pragma once

#include <systemc>

#include <memory>
#include <string>
#include <vector>

#include "command_processor_module.h"
#include "dma_engine.h"
#include "grid/pe_grid.h"
#include "host_bridge.h"
#include "host_channel.h"
#include "register_file.h"
#include "sim_shared.h"

namespace mtia::sim::detail {

// The whole device.
class DeviceModel : public sc_core::sc_module {
 public:
  DeviceModel(sc_core::sc_module_name name, SimShared& shared);
  ~DeviceModel() override;

  HostChannel& channel() { return channel_; }
  // Statistics of every module (simulator thread).
  std::string stats_json() const;

 private:
  static std::vector<DmaEngine*> raw(const std::vector<std::unique_ptr<DmaEngine>>& v);

  SimShared& shared_;
  HostChannel channel_;
  std::vector<std::unique_ptr<DmaEngine>> engines_;
  PeGrid grid_;
  CommandProcessorModule cp_;
  RegisterFile regs_;
  Bridge bridge_;
};

}  // namespace mtia::sim::detail
