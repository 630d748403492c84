#include "mtia/server/device_server.h"

#include <fcntl.h>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "mtia/driver/trace_channel.h"
#include "mtia/isa/access_scope.h"
#include "mtia/isa/address_map.h"
#include "mtia/isa/registers.h"
#include "mtia/log/logger.h"
#include "mtia/trace/level.h"
#include "mtia/wire/host_call_codec.h"
#include "mtia/wire/message_io.h"
#include "mtia/wire/protocol.h"

namespace mtia::server {
namespace {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using wire::MessageType;
using wire::PayloadReader;
using wire::Reply;

std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> log = mtia::log::get("server");
  return log;
}

isa::Failure bad_request(std::string why) {
  return isa::reject(isa::ErrorCode::kInvalidArgument, std::move(why));
}

// How long a dropped client's queued work may run before its memory is released anyway.
constexpr auto kQuiesceLimit = std::chrono::seconds(30);
// Client windows start and end on this boundary (a huge page), and are at least the minimum.
constexpr uint64_t kWindowAlign = 2ull << 20;
constexpr uint64_t kMinWindowBytes = 64ull << 20;

bool is_privileged_queue_field(uint64_t field) {
  return field == isa::reg::kQueueContext || field == isa::reg::kQueueWindowBase ||
         field == isa::reg::kQueueWindowBytes;
}

// A BAR0 offset inside the per-queue blocks as its queue and field; nullopt for other offsets.
struct QueueRegister {
  uint64_t queue = 0;
  uint64_t field = 0;
};
std::optional<QueueRegister> queue_register(uint64_t offset) {
  if (offset < isa::reg::kQueueBlock || offset >= isa::kBar0Bytes) return std::nullopt;
  const uint64_t at = offset - isa::reg::kQueueBlock;
  return QueueRegister{at / isa::reg::kQueueStride, at % isa::reg::kQueueStride};
}

uint64_t low_bits(uint32_t n) {
  return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
}

}  // namespace

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
  uint64_t mask() const { return low_bits(queues); }
};

// One client's connection.
struct Session {
  explicit Session(asio::io_context& io) : socket(io) {}
  local::socket socket;
  wire::MessageReader reader;
  uint64_t id = 0;
  bool first = false;  // the client_fd client (exit_with_client)
  bool closed = false;
  Slot* slot = nullptr;  // its share of the device, from the hello on
  struct Mapping {
    void* ptr = nullptr;
    uint64_t bytes = 0;
  };
  std::map<uint64_t, Mapping> mappings;  // bus address -> this process's mapping
  // Memory statistics of the client, logged when it leaves.
  uint64_t mapped_bytes = 0;       // host memory mapped for its DMA now, bytes
  uint64_t peak_mapped_bytes = 0;  // the most it had mapped at once, bytes
};

struct DeviceServer::Impl {
  ServerOptions options;
  asio::io_context io;
  std::unique_ptr<local::acceptor> acceptor;
  std::unique_ptr<driver::Backend> device;
  std::vector<Slot> slots;  // one per client the server serves at once
  std::list<std::shared_ptr<Session>> sessions;
  std::vector<Session::Mapping> retired;  // address ranges freed once the device is gone
  uint64_t next_session = 1;
  std::string lost;  // why the device was lost ("" while it works)
  // Why the device could not be opened, for a server started for one client: its hello is
  // answered with this, then the server stops.
  std::optional<isa::Failure> open_failure;
  bool stopping = false;

  // --- connections -------------------------------------------------------------------------
  void accept() {
    if (!acceptor) return;
    auto s = std::make_shared<Session>(io);
    acceptor->async_accept(s->socket, [this, s](const boost::system::error_code& ec) {
      if (ec) {
        if (ec != asio::error::operation_aborted) {
          logger()->warn("accepting a client failed: {}", ec.message());
        }
        if (!stopping) accept();
        return;
      }
      start(s);
      accept();
    });
  }

  void start(const std::shared_ptr<Session>& s) {
    s->id = next_session++;
    sessions.push_back(s);
    logger()->info("client {} connected", s->id);
    wait_readable(s);
  }

  void wait_readable(const std::shared_ptr<Session>& s) {
    s->socket.async_wait(local::socket::wait_read, [this, s](const boost::system::error_code& ec) {
      if (s->closed) return;
      if (ec) return drop(*s, "its socket failed: " + ec.message());
      on_readable(s);
    });
  }

  void on_readable(const std::shared_ptr<Session>& s) {
    const int fd = s->socket.native_handle();
    for (;;) {
      isa::Result<wire::MessageReader::ReadState> got = s->reader.read_some(fd);
      if (!got) return drop(*s, got.error().reason);
      for (;;) {
        isa::Result<std::optional<wire::Message>> m = s->reader.next();
        if (!m) return drop(*s, m.error().reason);
        if (!m.value()) break;
        if (isa::Status handled = handle(*s, *m.value()); !handled) {
          return drop(*s, handled.error().reason);
        }
        if (s->closed) return;
      }
      if (got.value() == wire::MessageReader::ReadState::kClosed) {
        return drop(*s, s->reader.buffered() > 0 ? "it disconnected in the middle of a message"
                                                 : "it disconnected");
      }
      if (got.value() == wire::MessageReader::ReadState::kWouldBlock) break;
    }
    wait_readable(s);
  }

  // Ends a session: its queued work finishes, then its host memory is released.
  void drop(Session& s, const std::string& why) {
    if (s.closed) return;
    s.closed = true;
    if (why == "it disconnected" || why == "the server is closing" || open_failure) {
      logger()->info("client {} left: {}", s.id, why);
    } else {
      logger()->warn("dropping client {}: {}", s.id, why);
    }
    boost::system::error_code ignored;
    s.socket.shutdown(local::socket::shutdown_both, ignored);
    s.socket.close(ignored);
    const bool exiting = s.first && options.exit_with_client;
    if (s.slot != nullptr) {
      Slot& slot = *s.slot;
      log_memory(s);
      if (!exiting) {  // else the device goes with the server
        reset_queues(slot);
        slot.int_enable = 0;
        write_int_enable();
        clear_window(slot);
      }
      slot.holder = nullptr;
      s.slot = nullptr;
    }
    release_mappings(s);
    sessions.remove_if([&](const std::shared_ptr<Session>& p) { return p.get() == &s; });
    if (exiting) {
      logger()->info("the client this server was started for has gone; stopping");
      finish();
    }
  }

  void release_mappings(Session& s) {
    for (auto& [bus, m] : s.mappings) {
      if (isa::Status un = device->unmap_host(bus); !un) {
        logger()->warn("releasing host memory of client {}: {}", s.id, un.error().reason);
      }
      retire(m);
    }
    s.mappings.clear();
  }

  // Lets go of a client's memory without unmapping it: a DMA or kernel the device started
  // before may still be writing there. Fresh anonymous pages replace the client's, so such a
  // write lands harmlessly; the address range itself is freed when the device is gone.
  void retire(const Session::Mapping& m) {
    void* p = mmap(m.ptr, m.bytes, PROT_READ | PROT_WRITE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      logger()->error("cannot retire a client mapping: {}", std::strerror(errno));
      return;
    }
    retired.push_back(m);
  }

  // Stops a client's queues at once: queued and waiting packets are dropped. (Work already
  // running on a DMA engine or the PE grid finishes on its own; retire() keeps it harmless.)
  void reset_queues(const Slot& slot) {
    if (!lost.empty()) return;
    for (uint32_t i = 0; i < slot.queues; ++i) {
      device->write_register(isa::reg::queue_reg(slot.first_queue + i, isa::reg::kQueueControl),
                             isa::kQueueReset);
    }
  }

  // The next client of a window finds it zeroed, and the memory goes back to the host.
  void clear_window(const Slot& slot) {
    if (fallocate(slot.window.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                  static_cast<off_t>(slot.window.bytes)) != 0) {
      logger()->warn("cannot clear the DRAM window of client slot {}: {}", slot.index,
                     std::strerror(errno));
    }
  }

  // Device memory a client's window holds now: the pages of its memory file, bytes.
  static uint64_t window_resident_bytes(const Slot& slot) {
    struct stat st {};
    if (fstat(slot.window.fd, &st) != 0) return 0;
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

  void log_memory(const Session& s) {
    const Slot& slot = *s.slot;
    logger()->info(
        "client {} (context {}) memory: device {:.1f} MiB in use of its {:.0f} MiB window at "
        "0x{:x}; host {:.1f} MiB mapped for DMA (peak {:.1f} MiB)",
        s.id, slot.scope.context, window_resident_bytes(slot) / 1048576.0,
        slot.window.bytes / 1048576.0, slot.window.device_addr, s.mapped_bytes / 1048576.0,
        s.peak_mapped_bytes / 1048576.0);
  }

  // The device's interrupt enables: each client's, at its queues' bits.
  void write_int_enable() {
    if (!lost.empty()) return;
    uint64_t all = 0;
    for (const Slot& slot : slots) all |= (slot.int_enable & slot.mask()) << slot.first_queue;
    device->write_register(isa::reg::kIntEnable, all);
  }

  // Gives each client slot its queues, context and window (ServerOptions::clients).
  isa::Status partition() {
    MTIA_ASSIGN_OR_RETURN(const uint64_t nq, device->read_register(isa::reg::kNumQueues));
    MTIA_ASSIGN_OR_RETURN(const uint64_t dram, device->read_register(isa::reg::kDramBytes));
    const uint32_t n = options.clients;
    if (n == 0 || n > nq) {
      return bad_request(fmt::format(
          "--clients {}: the device has {} hardware queues, so it serves 1 to {} clients at once",
          n, nq, nq));
    }
    const uint64_t window = dram / n / kWindowAlign * kWindowAlign;
    if (window < kMinWindowBytes) {
      return bad_request(fmt::format(
          "--clients {}: the device's {} MiB of DRAM leave each client {} MiB, under the {} MiB "
          "a client needs; serve fewer clients or give the device more DRAM",
          n, dram >> 20, window >> 20, kMinWindowBytes >> 20));
    }
    slots.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      Slot& slot = slots[i];
      slot.index = i;
      slot.queues = static_cast<uint32_t>(nq / n);
      slot.first_queue = i * slot.queues;
      slot.scope = {i + 1, isa::kDramBase + i * window, window};
      MTIA_ASSIGN_OR_RETURN(slot.window, device->split_window(slot.scope.window_base, window));
      for (uint32_t k = 0; k < slot.queues; ++k) {
        auto reg = [&](uint64_t field) { return isa::reg::queue_reg(slot.first_queue + k, field); };
        device->write_register(reg(isa::reg::kQueueControl), isa::kQueueReset);
        device->write_register(reg(isa::reg::kQueueContext), slot.scope.context);
        device->write_register(reg(isa::reg::kQueueWindowBase), slot.scope.window_base);
        device->write_register(reg(isa::reg::kQueueWindowBytes), slot.scope.window_bytes);
      }
    }
    // Posted writes are answered in order: this read sees them, and checks they took.
    MTIA_ASSIGN_OR_RETURN(
        const uint64_t last,
        device->read_register(isa::reg::queue_reg(
            slots.back().first_queue + slots.back().queues - 1, isa::reg::kQueueWindowBytes)));
    if (last != window) {
      return isa::reject(isa::ErrorCode::kDeviceUnavailable,
                         "the device did not take its queues' windows");
    }
    logger()->info("serving up to {} client{} at once: {} queues and {} MiB of DRAM each", n,
                   n == 1 ? "" : "s", nq / n, window >> 20);
    return {};
  }

  // --- a client's view of the registers (its queues numbered from 0) ----------------------
  isa::Result<uint64_t> read_register(const Slot& slot, uint64_t offset) {
    namespace reg = isa::reg;
    switch (offset) {
      case reg::kNumQueues:
        return uint64_t{slot.queues};
      case reg::kDramWindowBase:
        return slot.window.device_addr;
      case reg::kDramWindowBytes:
        return slot.window.bytes;
      case reg::kIntEnable:
        return slot.int_enable;
      case reg::kSanitize:
        return uint64_t{0};  // the sanitizer's table is device-wide: not offered to clients
      case reg::kIntStatus: {
        MTIA_ASSIGN_OR_RETURN(const uint64_t all, device->read_register(offset));
        return (all >> slot.first_queue) & slot.mask();
      }
      default:
        break;
    }
    if (const auto q = queue_register(offset)) {
      if (q->queue >= slot.queues) {
        return isa::reject(isa::ErrorCode::kBadRegister,
                           fmt::format("BAR0 offset 0x{:04x}: no register at this offset (this "
                                       "client has {} queues)",
                                       offset, slot.queues));
      }
      return device->read_register(reg::queue_reg(slot.first_queue + q->queue, q->field));
    }
    return device->read_register(offset);
  }

  void write_register(Session& s, uint64_t offset, uint64_t value) {
    namespace reg = isa::reg;
    Slot& slot = *s.slot;
    if (offset == reg::kIntEnable) {
      slot.int_enable = value & slot.mask();
      return write_int_enable();
    }
    if (offset == reg::kIntStatus) {
      return device->write_register(offset, (value & slot.mask()) << slot.first_queue);
    }
    if (const auto q = queue_register(offset)) {
      const bool not_its_queue = q->queue >= slot.queues;
      if (not_its_queue || is_privileged_queue_field(q->field)) {
        // A posted write has no answer: dropped and logged, as the device does with a bad one.
        logger()->warn("client {}: register write at BAR0 offset 0x{:04x} dropped: {}", s.id,
                       offset,
                       not_its_queue ? fmt::format("it has {} queues", slot.queues)
                                     : std::string("a queue's context and window are the "
                                                   "server's to set"));
        return;
      }
      return device->write_register(reg::queue_reg(slot.first_queue + q->queue, q->field), value);
    }
    if (offset == reg::kSanitize || offset == reg::kMemcheckBase || offset == reg::kMemcheckBytes ||
        offset == reg::kMemcheckOp) {
      logger()->warn(
          "client {}: register write at BAR0 offset 0x{:04x} dropped: the device "
          "server does not run the sanitizer for its clients",
          s.id, offset);
      return;
    }
    device->write_register(offset, value);
  }

  // Whether a client's memory-window access stays in its window.
  static isa::Status check_window(const Slot& slot, const char* what, uint64_t addr,
                                  uint64_t bytes) {
    if (slot.scope.covers(addr, bytes)) return {};
    return isa::reject(isa::ErrorCode::kDeviceAddressFault,
                       fmt::format("{} 0x{:x} + {} bytes: outside this client's device memory "
                                   "[0x{:x}, 0x{:x})",
                                   what, addr, bytes, slot.scope.window_base,
                                   slot.scope.window_base + slot.scope.window_bytes),
                       addr, bytes);
  }

  // Waits until every queue has finished the packets it was given (or halted on an error), at
  // most kQuiesceLimit: a server shutting down lets its clients' work finish.
  void quiesce() {
    if (!lost.empty()) return;
    const auto deadline = std::chrono::steady_clock::now() + kQuiesceLimit;
    isa::Result<uint64_t> nq = device->read_register(isa::reg::kNumQueues);
    if (!nq) return;
    for (uint32_t q = 0; q < nq.value() && q < isa::kMaxQueues; ++q) {
      for (;;) {
        auto tail = device->read_register(isa::reg::queue_reg(q, isa::reg::kQueueTail));
        auto done = device->read_register(isa::reg::queue_reg(q, isa::reg::kQueueCompleted));
        auto state = device->read_register(isa::reg::queue_reg(q, isa::reg::kQueueState));
        if (!tail || !done || !state) return;
        if (done.value() >= tail.value() ||
            state.value() == static_cast<uint64_t>(isa::QueueState::kError) ||
            state.value() == static_cast<uint64_t>(isa::QueueState::kDisabled)) {
          break;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          logger()->error("queue {} still busy after {} s; releasing its client's memory anyway", q,
                          kQuiesceLimit.count());
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      device->write_register(isa::reg::queue_reg(q, isa::reg::kQueueControl), isa::kQueueReset);
    }
  }

  // --- requests ----------------------------------------------------------------------------
  isa::Status send(Session& s, MessageType type, uint64_t id, const std::vector<uint8_t>& payload,
                   int fd = -1) {
    return wire::send_message(s.socket.native_handle(), type, id, payload.data(), payload.size(),
                              fd);
  }

  isa::Status reply(Session& s, uint64_t id, const Reply& r, int fd = -1) {
    return send(s, MessageType::kReply, id, wire::encode_reply(r), fd);
  }

  isa::Status reply_status(Session& s, uint64_t id, const isa::Status& st) {
    Reply r;
    if (!st) {
      r.code = st.error().code;
      r.text = st.error().reason;
      r.value = st.error().arg0;
      r.value2 = st.error().arg1;
    }
    return reply(s, id, r);
  }

  template <typename T>
  isa::Status reply_value(Session& s, uint64_t id, const isa::Result<T>& v) {
    if (!v) return reply_status(s, id, v.error());
    Reply r;
    r.value = v.value();
    return reply(s, id, r);
  }

  // Answers one message. A failure here is the client's fault: it is dropped.
  isa::Status handle(Session& s, wire::Message& m) {
    const MessageType type = m.header.type;
    const uint64_t id = m.header.request_id;
    PayloadReader in(m.payload.data(), m.payload.size(), type);
    if (m.fd && type != MessageType::kMapHost) {
      return bad_request(wire::message_type_name(static_cast<uint16_t>(type)) +
                         " carries a file descriptor it has no use for");
    }
    if (type == MessageType::kHello) return hello(s, id, in);
    if (type == MessageType::kReply || type == MessageType::kInterrupt ||
        type == MessageType::kLost) {
      return bad_request("a client sent a server's message (" +
                         wire::message_type_name(static_cast<uint16_t>(type)) + ")");
    }
    if (s.slot == nullptr) return bad_request("a request came before the hello");
    if (!lost.empty()) {
      if (wire::is_posted(type)) return {};
      return reply_status(s, id, isa::reject(isa::ErrorCode::kDeviceLost, lost));
    }
    switch (type) {
      case MessageType::kReadRegister: {
        MTIA_ASSIGN_OR_RETURN(const uint64_t offset, in.u64());
        MTIA_RETURN_IF_ERROR(in.finish());
        return reply_value(s, id, read_register(*s.slot, offset));
      }
      case MessageType::kWriteRegister: {
        MTIA_ASSIGN_OR_RETURN(const uint64_t offset, in.u64());
        MTIA_ASSIGN_OR_RETURN(const uint64_t value, in.u64());
        MTIA_RETURN_IF_ERROR(in.finish());
        write_register(s, offset, value);
        return {};
      }
      case MessageType::kReadMemory: {
        MTIA_ASSIGN_OR_RETURN(const uint64_t addr, in.u64());
        MTIA_ASSIGN_OR_RETURN(const uint64_t bytes, in.u64());
        MTIA_RETURN_IF_ERROR(in.finish());
        if (bytes > wire::kMaxMemoryChunk) {
          return bad_request(fmt::format("read memory of {} bytes is over the limit of {}", bytes,
                                         wire::kMaxMemoryChunk));
        }
        if (isa::Status ok = check_window(*s.slot, "read_memory", addr, bytes); !ok) {
          return reply_status(s, id, ok);
        }
        Reply r;
        r.data.resize(bytes);
        if (isa::Status read = device->read_memory(addr, r.data.data(), bytes); !read) {
          return reply_status(s, id, read);
        }
        return reply(s, id, r);
      }
      case MessageType::kWriteMemory: {
        MTIA_ASSIGN_OR_RETURN(const uint64_t addr, in.u64());
        if (isa::Status ok = check_window(*s.slot, "write_memory", addr, in.remaining()); !ok) {
          return reply_status(s, id, ok);
        }
        return reply_status(s, id, device->write_memory(addr, in.rest(), in.remaining()));
      }
      case MessageType::kMapHost:
        return map_host(s, id, in, std::move(m.fd));
      case MessageType::kUnmapHost: {
        MTIA_ASSIGN_OR_RETURN(const uint64_t bus, in.u64());
        MTIA_RETURN_IF_ERROR(in.finish());
        auto it = s.mappings.find(bus);
        if (it == s.mappings.end()) {
          return reply_status(
              s, id,
              isa::reject(isa::ErrorCode::kInvalidPointer,
                          fmt::format("unmap_host: bus address 0x{:x} is not the start of a "
                                      "range this client mapped",
                                      bus)));
        }
        isa::Status un = device->unmap_host(bus);
        retire(it->second);
        s.mapped_bytes -= it->second.bytes;
        s.mappings.erase(it);
        return reply_status(s, id, un);
      }
      case MessageType::kNow: {
        MTIA_RETURN_IF_ERROR(in.finish());
        return reply_value(s, id, isa::Result<uint64_t>(device->trace().now_ps()));
      }
      case MessageType::kWriteArtifacts: {
        MTIA_ASSIGN_OR_RETURN(const std::string dir, in.text(4096));
        MTIA_RETURN_IF_ERROR(in.finish());
        return reply_status(s, id, device->trace().write_artifacts(dir));
      }
      case MessageType::kConfigJson: {
        MTIA_RETURN_IF_ERROR(in.finish());
        Reply r;
        r.text = device->trace().config_json();
        return reply(s, id, r);
      }
      case MessageType::kSetTraceLevel: {
        MTIA_ASSIGN_OR_RETURN(const uint32_t level, in.u32());
        MTIA_RETURN_IF_ERROR(in.finish());
        if (level > static_cast<uint32_t>(trace::TraceLevel::kUnits)) {
          return reply_status(s, id, bad_request(fmt::format("trace level {} is unknown", level)));
        }
        return reply_status(s, id,
                            device->trace().set_trace_level(static_cast<trace::TraceLevel>(level)));
      }
      case MessageType::kTraceHostCall: {
        MTIA_ASSIGN_OR_RETURN(trace::HostCall call,
                              wire::decode_host_call(m.payload.data(), m.payload.size()));
        device->trace().trace_host_call(std::move(call));
        return {};
      }
      default:
        break;
    }
    return bad_request("unexpected " + wire::message_type_name(static_cast<uint16_t>(type)));
  }

  isa::Status hello(Session& s, uint64_t id, PayloadReader& in) {
    MTIA_ASSIGN_OR_RETURN(const uint32_t version, in.u32());
    MTIA_ASSIGN_OR_RETURN(const uint32_t zero, in.u32());
    MTIA_RETURN_IF_ERROR(in.finish());
    if (version != wire::kProtocolVersion || zero != 0) {
      return bad_request(fmt::format("hello with protocol version {}, this server speaks {}",
                                     version, wire::kProtocolVersion));
    }
    if (s.slot != nullptr) return bad_request("a second hello on one connection");
    if (open_failure) {
      MTIA_RETURN_IF_ERROR(reply_status(s, id, *open_failure));
      return *open_failure;
    }
    if (!lost.empty()) {
      return reply_status(s, id, isa::reject(isa::ErrorCode::kDeviceLost, lost));
    }
    Slot* free = nullptr;
    std::string holders;
    for (Slot& slot : slots) {
      if (slot.holder == nullptr) {
        free = &slot;
        break;
      }
      holders += (holders.empty() ? "" : ", ") + std::to_string(slot.holder->id);
    }
    if (free == nullptr) {
      MTIA_RETURN_IF_ERROR(reply_status(
          s, id,
          isa::reject(isa::ErrorCode::kDeviceUnavailable,
                      fmt::format("the device is in use by another client (client{} {}); this "
                                  "server serves {} client{} at once: start it with more "
                                  "--clients, start another server (mtia-emu serve), or try "
                                  "again when one has finished",
                                  slots.size() == 1 ? "" : "s", holders, slots.size(),
                                  slots.size() == 1 ? "" : "s"))));
      return {};
    }
    Slot& slot = *free;
    clear_window(slot);  // anything a late write of the last client's work left there
    slot.holder = &s;
    s.slot = &slot;
    logger()->info("client {} holds context {}: queues {}..{}, DRAM [0x{:x}, 0x{:x})", s.id,
                   slot.scope.context, slot.first_queue, slot.first_queue + slot.queues - 1,
                   slot.window.device_addr, slot.window.device_addr + slot.window.bytes);
    Reply r;
    r.value = slot.window.bytes;
    r.value2 = slot.window.device_addr;
    return reply(s, id, r, slot.window.fd);
  }

  isa::Status map_host(Session& s, uint64_t id, PayloadReader& in, wire::UniqueFd fd) {
    MTIA_ASSIGN_OR_RETURN(const uint64_t offset, in.u64());
    MTIA_ASSIGN_OR_RETURN(const uint64_t bytes, in.u64());
    MTIA_RETURN_IF_ERROR(in.finish());
    if (!fd) return bad_request("map host without the memory's file descriptor");
    struct stat st {};
    const long page = sysconf(_SC_PAGESIZE);
    if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return reply_status(s, id, bad_request("map_host: the descriptor is not a memory file"));
    }
    const auto size = static_cast<uint64_t>(st.st_size);
    if (bytes == 0 || offset % static_cast<uint64_t>(page) != 0 || offset > size ||
        bytes > size - offset) {
      return reply_status(
          s, id,
          bad_request(fmt::format("map_host: {} bytes at offset {} do not lie page-aligned inside "
                                  "the {}-byte memory file",
                                  bytes, offset, size)));
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(),
                   static_cast<off_t>(offset));
    if (p == MAP_FAILED) {
      return reply_status(s, id,
                          isa::reject(isa::ErrorCode::kOutOfMemory,
                                      std::string("map_host: mmap failed: ") + strerror(errno)));
    }
    isa::Result<uint64_t> bus = device->map_host_in_context(s.slot->scope.context, p, bytes);
    if (!bus) {
      munmap(p, bytes);
      return reply_status(s, id, bus.error());
    }
    s.mappings[bus.value()] = {p, bytes};
    s.mapped_bytes += bytes;
    s.peak_mapped_bytes = std::max(s.peak_mapped_bytes, s.mapped_bytes);
    Reply r;
    r.value = bus.value();
    return reply(s, id, r);
  }

  // --- device events (from the simulator thread) -------------------------------------------
  void on_interrupt(uint64_t mask) {
    asio::post(io, [this, mask] {
      for (Slot& slot : slots) {
        const uint64_t mine = (mask >> slot.first_queue) & slot.mask();
        if (mine == 0 || slot.holder == nullptr || slot.holder->closed) continue;
        wire::PayloadWriter w;
        w.u64(mine);
        if (isa::Status sent = send(*slot.holder, MessageType::kInterrupt, 0, w.data()); !sent) {
          drop(*slot.holder, sent.error().reason);
        }
      }
    });
  }

  void on_lost(const std::string& why) {
    asio::post(io, [this, why] {
      lost = why;
      logger()->error("the device was lost: {}", why);
      tell_all_and_close(why);
      finish();
    });
  }

  void tell_all_and_close(const std::string& why) {
    wire::PayloadWriter w;
    w.bytes(why.data(), why.size());
    auto all = sessions;
    for (auto& s : all) {
      if (s->closed) continue;
      (void)send(*s, MessageType::kLost, 0, w.data());
      drop(*s, "the server is closing");
    }
  }

  void finish() {
    stopping = true;
    boost::system::error_code ignored;
    if (acceptor) acceptor->close(ignored);
    io.stop();
  }

  // SIGTERM / stop(): work in flight finishes, then clients are told and the server exits.
  void shut_down(const std::string& why) {
    if (stopping) return;
    logger()->info("shutting down: {}", why);
    stopping = true;
    boost::system::error_code ignored;
    if (acceptor) acceptor->close(ignored);
    quiesce();
    tell_all_and_close("the device server shut down (" + why + ")");
    finish();
  }
};

isa::Result<std::unique_ptr<DeviceServer>> DeviceServer::create(ServerOptions options) {
  auto impl = std::make_unique<Impl>();
  wire::UniqueFd first(options.client_fd);
  options.client_fd = -1;
  if (options.socket_path.empty() && !first) {
    return bad_request("a device server needs a socket path (--socket PATH) to listen on");
  }
  impl->options = options;
  isa::Result<std::unique_ptr<driver::Backend>> device =
      driver::create_backend("inprocess", options.device);
  if (device) {
    impl->device = std::move(device).value();
    if (isa::Status shared = impl->partition(); !shared) {
      if (!first) return shared.error();
      impl->open_failure = shared.error();
    }
    Impl* self = impl.get();
    impl->device->set_interrupt_handler([self](uint64_t mask) { self->on_interrupt(mask); });
    impl->device->set_lost_handler([self](const std::string& why) { self->on_lost(why); });
  } else if (first) {
    impl->open_failure = device.error();  // told to the client, whose options they were
  } else {
    return device.error();
  }

  if (!options.socket_path.empty()) {
    if (options.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
      return bad_request(
          fmt::format("socket path '{}' is longer than a Unix socket path may be "
                      "({} bytes); choose a shorter one",
                      options.socket_path, sizeof(sockaddr_un::sun_path) - 1));
    }
    struct stat st {};
    if (lstat(options.socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      ::unlink(options.socket_path.c_str());  // a stale socket from an earlier server
    }
    try {
      impl->acceptor = std::make_unique<local::acceptor>(impl->io);
      local::endpoint ep(options.socket_path);
      impl->acceptor->open(ep.protocol());
      impl->acceptor->bind(ep);
      impl->acceptor->listen();
    } catch (const boost::system::system_error& e) {
      return isa::reject(isa::ErrorCode::kDeviceUnavailable,
                         fmt::format("cannot listen on '{}': {}", options.socket_path, e.what()));
    }
  }
  if (first) {
    auto s = std::make_shared<Session>(impl->io);
    boost::system::error_code ec;
    s->socket.assign(local(), first.release(), ec);
    if (ec) {
      return isa::reject(isa::ErrorCode::kDeviceUnavailable,
                         "cannot use the client socket: " + ec.message());
    }
    s->first = true;
    impl->start(s);
  }
  return std::unique_ptr<DeviceServer>(new DeviceServer(std::move(impl)));
}

DeviceServer::DeviceServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceServer::~DeviceServer() {
  if (!impl_) return;
  for (auto& s : impl_->sessions) impl_->release_mappings(*s);
  if (impl_->device) {
    impl_->device->set_interrupt_handler({});
    impl_->device->set_lost_handler({});
    impl_->device.reset();
  }
  for (const auto& m : impl_->retired) munmap(m.ptr, m.bytes);
  if (!impl_->options.socket_path.empty() && impl_->acceptor) {
    ::unlink(impl_->options.socket_path.c_str());
  }
}

isa::Status DeviceServer::run(bool handle_signals) {
  Impl& d = *impl_;
  asio::signal_set signals(d.io);
  if (handle_signals) {
    signals.add(SIGTERM);
    signals.add(SIGINT);
    signals.async_wait([&d](const boost::system::error_code& ec, int sig) {
      if (!ec) d.shut_down(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    });
  }
  d.accept();
  d.io.run();
  if (d.open_failure) return *d.open_failure;
  if (!d.lost.empty()) return isa::reject(isa::ErrorCode::kDeviceLost, d.lost);
  return {};
}

void DeviceServer::stop() {
  asio::post(impl_->io, [this] { impl_->shut_down("stop requested"); });
}

}  // namespace mtia::server
