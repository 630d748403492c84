#include "register_file.h"

#include <cstring>

#include "sim_loggers.h"

namespace mtia::sim::detail {

using sc_core::sc_time;

RegisterFile::RegisterFile(sc_core::sc_module_name name, CommandProcessorModule& cp)
    : sc_core::sc_module(name), socket("socket"), cp_(cp) {
  socket.register_b_transport(this, &RegisterFile::b_transport);
}

void RegisterFile::b_transport(tlm::tlm_generic_payload& p, sc_core::sc_time& /*delay*/) {
  const uint64_t offset = p.get_address();
  auto reject = [&](tlm::tlm_response_status status, isa::Failure why) {
    ++rejected_;
    logger("sim.bridge")
        ->warn("BAR0 {} at offset 0x{:x} rejected: {}", p.is_read() ? "read" : "write", offset,
               why.reason);
    last_rejection_ = std::move(why);
    p.set_response_status(status);
  };
  if (p.get_data_length() != 8 || p.get_streaming_width() != 8 ||
      p.get_byte_enable_ptr() != nullptr) {
    reject(tlm::TLM_BURST_ERROR_RESPONSE,
           isa::reject(isa::ErrorCode::kBadRegister,
                       "BAR0 registers take whole, naturally aligned 8-byte accesses"));
    return;
  }
  if (p.is_read()) {
    ++reads_;
    auto value = cp_.firmware().read_register(offset);
    if (!value) return reject(tlm::TLM_ADDRESS_ERROR_RESPONSE, value.error());
    std::memcpy(p.get_data_ptr(), &value.value(), 8);
  } else if (p.is_write()) {
    ++writes_;
    uint64_t v = 0;
    std::memcpy(&v, p.get_data_ptr(), 8);
    auto done = cp_.firmware().write_register(offset, v);
    if (!done) return reject(tlm::TLM_ADDRESS_ERROR_RESPONSE, done.error());
    cp_.notify_work();
  } else {
    return reject(tlm::TLM_COMMAND_ERROR_RESPONSE,
                  isa::reject(isa::ErrorCode::kBadRegister, "only reads and writes exist"));
  }
  p.set_response_status(tlm::TLM_OK_RESPONSE);
}

Json RegisterFile::stats_json() const {
  Json m = Json::object();
  add_stat(m, "register_reads", reads_, "accesses", "BAR0 reads that reached the register file");
  add_stat(m, "register_writes", writes_, "accesses", "BAR0 writes that reached the register file");
  add_stat(m, "rejected_accesses", rejected_, "accesses",
           "BAR0 accesses the firmware rejected (unmapped, read-only, bad value); logged");
  return m;
}

}  // namespace mtia::sim::detail
