#include "host_bridge.h"

#include <exception>

#include "sim_loggers.h"

namespace mtia::sim::detail {

using sc_core::sc_time;

Bridge::Bridge(sc_core::sc_module_name name, SimShared& shared, HostChannel& channel,
               RegisterFile& regs)
    : sc_core::sc_module(name), socket("socket"), shared_(shared), channel_(channel), regs_(regs) {
  SC_HAS_PROCESS(Bridge);
  SC_THREAD(run);
  set_stack_size(kThreadStackBytes);
  arrived_or_idle_ |= channel_.arrived;
  arrived_or_idle_ |= channel_.device_idle;
}

void Bridge::run() {
  for (;;) {
    HostRequest request;
    // Checking and waiting happen in one evaluation phase; the channel's update (and so the
    // notification) comes after it, so a request pushed in between is never missed.
    while (!shared_.inbox.pop(request)) {
      if (poll_inbox()) continue;
      if (shared_.wait == host::WaitPolicy::kBlock) {
        wait(channel_.arrived);  // no poll to make when the device goes idle
      } else {
        wait(arrived_or_idle_);
      }
    }
    // Where the device side runs now, for the host's wait policy (isa/wait.h, spin_pays).
    if (shared_.wait == host::WaitPolicy::kAuto) host::note_cpu(host::WaitSide::kDevice);
    shared_.sync_time();
    handle(request);
  }
}

bool Bridge::poll_inbox() {
  // Only when the kernel has nothing else to do at any time: then it would suspend now, and
  // polling in its place neither delays other processes nor lets simulated time move on, so
  // a request found here is handled at the very simulated time it would have been.
  if (stopping_ || shared_.wait == host::WaitPolicy::kBlock || sc_core::sc_pending_activity()) {
    return false;
  }
  shared_.inbox.begin_polling();
  host::poll_before_block(shared_.wait, host::WaitSide::kDevice,
                          [&] { return shared_.inbox.has_request(); });
  return shared_.inbox.end_polling();
}

void Bridge::handle(HostRequest& r) {
  using Kind = HostRequest::Kind;
  switch (r.kind) {
    case Kind::kWriteRegister:
    case Kind::kReadRegister: {
      const bool read = r.kind == Kind::kReadRegister;
      uint64_t data = r.value;
      tlm::tlm_generic_payload p;
      p.set_command(read ? tlm::TLM_READ_COMMAND : tlm::TLM_WRITE_COMMAND);
      p.set_address(r.offset);
      p.set_data_ptr(reinterpret_cast<unsigned char*>(&data));
      p.set_data_length(8);
      p.set_streaming_width(8);
      p.set_byte_enable_ptr(nullptr);
      p.set_dmi_allowed(false);
      p.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
      sc_time delay = sc_core::SC_ZERO_TIME;
      socket->b_transport(p, delay);
      (read ? reads_ : writes_) += 1;
      const bool ok = p.is_response_ok();
      if (!ok) ++rejected_;
      if (r.reply != nullptr) {
        if (ok) {
          r.reply->set_value(read ? data : uint64_t{0});
        } else {
          r.reply->set_value(regs_.last_rejection());
        }
      }
      return;
    }
    case Kind::kCall:
      ++calls_;
      try {
        r.call();
        if (r.reply != nullptr) r.reply->set_value(uint64_t{0});
      } catch (const std::exception& e) {
        if (r.reply != nullptr) {
          r.reply->set_value(isa::reject(isa::ErrorCode::kUnsupported, e.what()));
        }
      }
      return;
    case Kind::kStop:
      stopping_ = true;
      if (r.reply != nullptr) r.reply->set_value(uint64_t{0});
      sc_core::sc_stop();
      return;
  }
}

Json Bridge::stats_json() const {
  Json m = Json::object();
  add_stat(m, "register_reads", reads_, "accesses", "host BAR0 reads");
  add_stat(m, "register_writes", writes_, "accesses", "host BAR0 writes (posted)");
  add_stat(m, "rejected_accesses", rejected_, "accesses",
           "host BAR0 accesses answered with a TLM error response");
  add_stat(m, "snapshot_calls", calls_, "calls", "host requests run on the simulator thread");
  return m;
}

}  // namespace mtia::sim::detail
