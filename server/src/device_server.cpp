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

#include "client_slots.h"
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
}  // namespace

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
  std::list<std::shared_ptr<Session>> sessions;
  std::vector<Session::Mapping> retired;  // address ranges freed once the device is gone
  uint64_t next_session = 1;
  std::string lost;           // why the device was lost ("" while it works)
  ClientSlots clients{lost};  // one slot per client the server serves at once
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
        clients.reset_queues(slot);
        clients.stop_sanitizer();
        slot.int_enable = 0;
        clients.write_int_enable();
        ClientSlots::clear_window(slot);
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

  void log_memory(const Session& s) {
    const Slot& slot = *s.slot;
    logger()->info(
        "client {} (context {}) memory: device {:.1f} MiB in use of its {:.0f} MiB window at "
        "0x{:x}; host {:.1f} MiB mapped for DMA (peak {:.1f} MiB)",
        s.id, slot.scope.context, ClientSlots::resident_bytes(slot) / 1048576.0,
        slot.window.bytes / 1048576.0, slot.window.device_addr, s.mapped_bytes / 1048576.0,
        s.peak_mapped_bytes / 1048576.0);
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
        return reply_value(s, id, clients.read_register(*s.slot, offset));
      }
      case MessageType::kWriteRegister: {
        MTIA_ASSIGN_OR_RETURN(const uint64_t offset, in.u64());
        MTIA_ASSIGN_OR_RETURN(const uint64_t value, in.u64());
        MTIA_RETURN_IF_ERROR(in.finish());
        clients.write_register(*s.slot, s.id, offset, value);
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
        if (isa::Status ok = ClientSlots::check_window(*s.slot, "read_memory", addr, bytes); !ok) {
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
        if (isa::Status ok =
                ClientSlots::check_window(*s.slot, "write_memory", addr, in.remaining());
            !ok) {
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
      case MessageType::kNoteWritten: {
        MTIA_ASSIGN_OR_RETURN(const uint64_t addr, in.u64());
        MTIA_ASSIGN_OR_RETURN(const uint64_t bytes, in.u64());
        MTIA_RETURN_IF_ERROR(in.finish());
        clients.note_written(*s.slot, s.id, addr, bytes);
        return {};
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
    for (Slot& slot : clients.slots()) {
      if (slot.holder == nullptr) {
        free = &slot;
        break;
      }
      holders += (holders.empty() ? "" : ", ") + std::to_string(slot.holder->id);
    }
    if (free == nullptr) {
      MTIA_RETURN_IF_ERROR(reply_status(
          s, id,
          isa::reject(
              isa::ErrorCode::kDeviceUnavailable,
              fmt::format("the device is in use by another client (client{} {}); this "
                          "server serves {} client{} at once: start it with more "
                          "--clients, start another server (mtia-emu serve), or try "
                          "again when one has finished",
                          clients.slots().size() == 1 ? "" : "s", holders, clients.slots().size(),
                          clients.slots().size() == 1 ? "" : "s"))));
      return {};
    }
    Slot& slot = *free;
    ClientSlots::clear_window(slot);  // anything a late write of the last client's work left there
    clients.stop_sanitizer();         // and the last client's allocation table
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
      for (Slot& slot : clients.slots()) {
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
    if (isa::Status shared = impl->clients.partition(*impl->device, options.clients); !shared) {
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
