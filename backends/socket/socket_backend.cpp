// The socket backend: a device in another process, a device server (`mtia-emu serve`, server/),
// reached over a Unix-domain socket (wire/protocol.h).
//
// BackendOptions::server names the server's socket. Left empty, the backend starts a server
// of its own for this device: `mtia-emu serve --fd 3` on one end of a socketpair, so the
// server exits when this process closes the socket, also when it is killed: no orphans.
//
// Device DRAM is the server's memfd, mapped here: the driver's ring writes and completion
// reads are plain memory accesses, as through a PCIe BAR. Host memory the device may DMA must
// be shared too: alloc_host() hands out memfd-backed buffers whose descriptors map_host()
// sends to the server; other host memory cannot be reached (kUnsupported), and the host API
// stages it. With the sanitizer's initcheck on, each write through the mapping is followed by a
// note of its range (kNoteWritten), so that the device counts the bytes written. A reader thread
// takes replies, interrupts and the server's lost notice; a server that dies is seen at once (end
// of stream) and reported through the lost handler.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "mtia/driver/backend.h"
#include "mtia/driver/trace_channel.h"
#include "mtia/host/install_dirs.h"
#include "mtia/isa/registers.h"
#include "mtia/isa/sanitize.h"
#include "mtia/log/logger.h"
#include "mtia/settings/settings.h"
#include "mtia/wire/host_call_codec.h"
#include "mtia/wire/message_io.h"
#include "mtia/wire/protocol.h"

extern char** environ;

namespace mtia::backends {
namespace {

using wire::MessageType;
using wire::PayloadWriter;
using wire::UniqueFd;

std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> log = mtia::log::get("backend.socket");
  return log;
}

isa::Failure bad_argument(std::string why) {
  return isa::reject(isa::ErrorCode::kInvalidArgument, std::move(why));
}

isa::Failure unavailable(std::string why) {
  return isa::reject(isa::ErrorCode::kDeviceUnavailable, std::move(why));
}

// The mtia-emu program that serves devices: $MTIA_EMU_BIN, the installation's, or the build
// tree's.
std::string server_program() {
  if (auto program = settings::read("MTIA_EMU_BIN")) return *program;
  const std::string data = host::installed_data_dir();  // <prefix>/share/mtia-emu
  if (!data.empty()) {
    const auto bin = std::filesystem::path(data).parent_path().parent_path() / "bin" / "mtia-emu";
    if (std::filesystem::exists(bin)) return bin.string();
  }
  return MTIA_BUILD_TREE_PROGRAM;
}

long page_bytes() {
  static const long page = sysconf(_SC_PAGESIZE);
  return page;
}

class SocketBackend final : public driver::Backend, public driver::TraceChannel {
 public:
  static isa::Result<std::unique_ptr<driver::Backend>> open(const driver::BackendOptions& options) {
    std::unique_ptr<SocketBackend> b(new SocketBackend());
    if (options.server.empty()) {
      MTIA_RETURN_IF_ERROR(b->spawn(options));
    } else {
      MTIA_RETURN_IF_ERROR(b->connect_to(options.server));
    }
    MTIA_RETURN_IF_ERROR(b->hello());
    return std::unique_ptr<driver::Backend>(std::move(b));
  }

  ~SocketBackend() override {
    if (getpid() != owner_pid_) {
      // A forked child (a DataLoader worker, say) closing its copy: the connection, the reader
      // thread and the server are the parent's. Shutting the socket down would cut the
      // parent off, and the reader thread does not exist here; let go of the descriptor only.
      reader_.detach();
      writer_.detach();
      return;
    }
    {
      std::lock_guard lock(handler_mu_);  // the driver going away wants no more calls
      interrupt_ = {};
      lost_handler_ = {};
    }
    closing_ = true;
    if (socket_) ::shutdown(socket_.get(), SHUT_RDWR);
    if (reader_.joinable()) reader_.join();
    {
      std::lock_guard lock(send_mu_);
      stopping_ = true;
    }
    outbox_cv_.notify_all();
    if (writer_.joinable()) writer_.join();
    if (window_ != nullptr) munmap(window_, window_bytes_);
    {
      std::lock_guard lock(segments_mu_);
      for (auto it = segments_.begin(); it != segments_.end();) {
        if (it->second.owner == this) {
          munmap(it->first, it->second.bytes);
          it = segments_.erase(it);
        } else {
          ++it;
        }
      }
    }
    reap_server();
  }

  // --- registers ---------------------------------------------------------------------------
  isa::Result<uint64_t> read_register(uint64_t offset) override {
    PayloadWriter w;
    w.u64(offset);
    MTIA_ASSIGN_OR_RETURN(const wire::Reply r, call(MessageType::kReadRegister, w.data()));
    return r.value;
  }

  void write_register(uint64_t offset, uint64_t value) override {
    if (offset == isa::reg::kSanitize) {
      initcheck_.store((value & isa::kSanitizeInitcheck) != 0, std::memory_order_relaxed);
    }
    PayloadWriter w;
    w.u64(offset).u64(value);
    if (isa::Status sent = post(MessageType::kWriteRegister, w.data()); !sent) {
      logger()->warn("register write at 0x{:x} dropped: {}", offset, sent.error().reason);
    }
  }

  // --- the memory window -------------------------------------------------------------------
  isa::Status read_memory(uint64_t addr, void* dst, uint64_t bytes) override {
    if (uint8_t* p = in_window(addr, bytes)) {
      if (bytes > 0) std::memcpy(dst, p, bytes);
      return {};
    }
    auto* out = static_cast<uint8_t*>(dst);
    for (uint64_t done = 0; done < bytes || bytes == 0;) {
      const uint64_t n = std::min(bytes - done, wire::kMaxMemoryChunk);
      PayloadWriter w;
      w.u64(addr + done).u64(n);
      MTIA_ASSIGN_OR_RETURN(const wire::Reply r, call(MessageType::kReadMemory, w.data()));
      if (r.data.size() != n) {
        return lose("the server answered a memory read of " + std::to_string(n) + " bytes with " +
                    std::to_string(r.data.size()));
      }
      if (n > 0) std::memcpy(out + done, r.data.data(), n);
      done += n;
      if (bytes == 0) break;
    }
    return {};
  }

  isa::Status write_memory(uint64_t addr, const void* src, uint64_t bytes) override {
    if (uint8_t* p = in_window(addr, bytes)) {
      if (bytes > 0) std::memcpy(p, src, bytes);
      if (bytes > 0 && initcheck_.load(std::memory_order_relaxed)) {
        // Posted after the bytes, and so before any doorbell that makes the device read them.
        PayloadWriter w;
        w.u64(addr).u64(bytes);
        if (isa::Status sent = post(MessageType::kNoteWritten, w.data()); !sent) return sent;
      }
      return {};
    }
    const auto* in = static_cast<const uint8_t*>(src);
    for (uint64_t done = 0; done < bytes || bytes == 0;) {
      const uint64_t n = std::min(bytes - done, wire::kMaxMemoryChunk);
      PayloadWriter w;
      w.u64(addr + done).bytes(in + done, n);
      if (auto r = call(MessageType::kWriteMemory, w.data()); !r) return r.error();
      done += n;
      if (bytes == 0) break;
    }
    return {};
  }

  // --- host memory -------------------------------------------------------------------------
  isa::Result<void*> alloc_host(uint64_t bytes) override {
    if (bytes == 0) return bad_argument("alloc_host: cannot allocate 0 bytes");
    const uint64_t page = static_cast<uint64_t>(page_bytes());
    if (bytes > (1ull << 46))
      return bad_argument("alloc_host: " + std::to_string(bytes) + " bytes is too large");
    const uint64_t size = (bytes + page - 1) / page * page;
    UniqueFd fd(memfd_create("mtia-host", MFD_CLOEXEC));
    if (!fd || ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
      return isa::reject(isa::ErrorCode::kOutOfMemory,
                         fmt::format("alloc_host: cannot make {} bytes of shared memory: {}", size,
                                     std::strerror(errno)));
    }
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) {
      return isa::reject(isa::ErrorCode::kOutOfMemory,
                         fmt::format("alloc_host: cannot map {} bytes of shared memory: {}", size,
                                     std::strerror(errno)));
    }
    std::lock_guard lock(segments_mu_);
    segments_[static_cast<uint8_t*>(p)] = Segment{size, std::move(fd), this};
    return p;
  }

  isa::Status free_host(void* ptr) override {
    std::lock_guard lock(segments_mu_);
    auto it = segments_.find(static_cast<uint8_t*>(ptr));
    if (it == segments_.end()) {
      return isa::reject(isa::ErrorCode::kInvalidPointer,
                         fmt::format("free_host: {} was not returned by alloc_host", ptr));
    }
    munmap(it->first, it->second.bytes);
    segments_.erase(it);
    return {};
  }

  isa::Result<uint64_t> map_host(void* ptr, uint64_t bytes) override {
    if (ptr == nullptr) return bad_argument("map_host: the host pointer is null");
    if (bytes == 0) return bad_argument("map_host: cannot register 0 bytes");
    const auto* p = static_cast<uint8_t*>(ptr);
    int fd = -1;
    uint64_t offset = 0;
    {
      std::lock_guard lock(segments_mu_);
      auto it = segments_.upper_bound(const_cast<uint8_t*>(p));
      if (it != segments_.begin()) {
        --it;
        const uint64_t off = static_cast<uint64_t>(p - it->first);
        if (off < it->second.bytes && bytes <= it->second.bytes - off) {
          fd = it->second.fd.get();
          offset = off;
        }
      }
    }
    if (fd < 0) {
      return isa::reject(isa::ErrorCode::kUnsupported,
                         "map_host: the device runs in a device server, which reaches only host "
                         "memory shared with it (from alloc_host)");
    }
    // The server maps whole pages: send the page-aligned range and add the offset back.
    const uint64_t page = static_cast<uint64_t>(page_bytes());
    const uint64_t aligned = offset / page * page;
    PayloadWriter w;
    w.u64(aligned).u64(bytes + (offset - aligned));
    MTIA_ASSIGN_OR_RETURN(const wire::Reply r, call(MessageType::kMapHost, w.data(), fd));
    std::lock_guard lock(segments_mu_);
    bus_base_[r.value + (offset - aligned)] = r.value;
    return r.value + (offset - aligned);
  }

  isa::Status unmap_host(uint64_t bus_addr) override {
    uint64_t base = 0;
    {
      std::lock_guard lock(segments_mu_);
      auto it = bus_base_.find(bus_addr);
      if (it == bus_base_.end()) {
        return isa::reject(isa::ErrorCode::kInvalidPointer,
                           fmt::format("unmap_host: bus address 0x{:x} is not the start of a "
                                       "range registered with map_host",
                                       bus_addr));
      }
      base = it->second;
      bus_base_.erase(it);
    }
    PayloadWriter w;
    w.u64(base);
    if (auto r = call(MessageType::kUnmapHost, w.data()); !r) return r.error();
    return {};
  }

  // --- interrupts and loss -----------------------------------------------------------------
  void set_interrupt_handler(std::function<void(uint64_t)> handler) override {
    std::lock_guard lock(handler_mu_);
    interrupt_ = std::move(handler);
  }

  void set_lost_handler(std::function<void(const std::string&)> handler) override {
    std::string already;
    {
      std::lock_guard lock(handler_mu_);
      lost_handler_ = std::move(handler);
      std::lock_guard calls(calls_mu_);
      already = lost_;
    }
    if (!already.empty()) {
      std::lock_guard lock(handler_mu_);
      if (lost_handler_) lost_handler_(already);
    }
  }

  // --- trace channel -----------------------------------------------------------------------
  driver::TraceChannel& trace() override { return *this; }
  uint64_t now_ps() override {
    auto r = call(MessageType::kNow, {});
    return r ? r.value().value : 0;
  }
  isa::Status write_artifacts(const std::string& dir) override {
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(dir, ec).string();
    PayloadWriter w;
    w.text(ec ? dir : abs);
    if (auto r = call(MessageType::kWriteArtifacts, w.data()); !r) return r.error();
    return {};
  }
  std::string config_json() override {
    auto r = call(MessageType::kConfigJson, {});
    return r ? r.value().text : std::string("{}");
  }
  isa::Status set_trace_level(trace::TraceLevel level) override {
    PayloadWriter w;
    w.u32(static_cast<uint32_t>(level));
    if (auto r = call(MessageType::kSetTraceLevel, w.data()); !r) return r.error();
    return {};
  }
  void trace_host_call(trace::HostCall call) override {
    const std::vector<uint8_t> bytes = wire::encode_host_call(call);
    (void)post(MessageType::kTraceHostCall, bytes);
  }

 private:
  struct Outgoing {
    std::vector<uint8_t> bytes;  // what is left to send
    int fd = -1;                 // sent with the first byte (owned by the caller, who waits)
  };
  struct Segment {
    uint64_t bytes = 0;
    UniqueFd fd;
    const SocketBackend* owner = nullptr;  // the backend that made it (frees it at the end)
  };
  struct Pending {
    bool done = false;
    isa::Result<wire::Reply> reply = wire::Reply{};
  };

  SocketBackend() = default;

  uint8_t* in_window(uint64_t addr, uint64_t bytes) const {
    if (window_ == nullptr || addr < window_addr_) return nullptr;
    const uint64_t off = addr - window_addr_;
    if (off >= window_bytes_ || bytes > window_bytes_ - off) return nullptr;
    return window_ + off;
  }

  isa::Status connect_to(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) {
      return bad_argument("device server socket path '" + path + "' is too long");
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    socket_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!socket_ ||
        ::connect(socket_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      return unavailable(fmt::format(
          "cannot reach a device server at '{}': {} (start one with `mtia-emu serve --socket {}`)",
          path, std::strerror(errno), path));
    }
    where_ = "the device server at " + path;
    return {};
  }

  isa::Status spawn(const driver::BackendOptions& o) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      return unavailable(std::string("socketpair failed: ") + std::strerror(errno));
    }
    socket_.reset(pair[0]);
    UniqueFd child(pair[1]);
    const std::string program = server_program();
    std::vector<std::string> args = {
        program,    "serve",  "--fd",    "3",
        "--preset", o.preset, "--trace", trace::trace_level_name(o.trace.level)};
    for (const auto& s : o.overrides) {
      args.push_back("--set");
      args.push_back(s);
    }
    if (!o.timing) args.push_back("--no-timing");
    args.insert(args.end(), {"--trace-max-events", std::to_string(o.trace.max_events), "--wait",
                             host::wait_policy_name(o.wait)});
    if (o.unit_threads)
      args.insert(args.end(), {"--unit-threads", std::to_string(*o.unit_threads)});
    if (o.inline_work_ns) {
      args.insert(args.end(), {"--inline-work-ns", std::to_string(*o.inline_work_ns)});
    }
    if (o.lazy_loads) args.insert(args.end(), {"--lazy-loads", *o.lazy_loads ? "1" : "0"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, child.get(), 3);  // dup2 clears close-on-exec
    pid_t pid = -1;
    const int err = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0) {
      return unavailable(
          fmt::format("cannot start a device server '{}': {} (set MTIA_EMU_BIN to "
                      "the mtia-emu program)",
                      program, std::strerror(err)));
    }
    pid_ = pid;
    where_ = fmt::format("the device server this process started (pid {})", pid);
    return {};
  }

  void reap_server() {
    if (pid_ <= 0) return;
    // Our end of the socket is closed: the server exits on its own. Give it a moment.
    for (int i = 0; i < 500; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    logger()->warn("{} did not exit; killing it", where_);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

  isa::Status hello() {
    reader_ = std::thread([this] { read_loop(); });
    writer_ = std::thread([this] { write_loop(); });
    PayloadWriter w;
    w.u32(wire::kProtocolVersion).u32(0);
    isa::Result<wire::Reply> r = call(MessageType::kHello, w.data());
    if (!r) {
      if (r.error().code == isa::ErrorCode::kDeviceLost) {
        return unavailable(where_ + " did not answer: " + r.error().reason);
      }
      if (r.error().code == isa::ErrorCode::kInvalidArgument) return r.error();  // our options
      return unavailable(where_ + ": " + r.error().reason);
    }
    UniqueFd fd = std::move(hello_fd_);
    if (!fd) return unavailable(where_ + " shared no device memory window");
    window_bytes_ = r.value().value;
    window_addr_ = r.value().value2;
    void* p = mmap(nullptr, window_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                   fd.get(), 0);
    if (p == MAP_FAILED) {
      window_bytes_ = 0;
      return unavailable(fmt::format("cannot map the device memory window ({} bytes): {}",
                                     r.value().value, std::strerror(errno)));
    }
    window_ = static_cast<uint8_t*>(p);
    return {};
  }

  // Sends a request and waits for its reply (kDeviceLost once the server has gone).
  isa::Result<wire::Reply> call(MessageType type, const std::vector<uint8_t>& payload,
                                int fd = -1) {
    auto pending = std::make_shared<Pending>();
    uint64_t id = 0;
    {
      std::lock_guard lock(calls_mu_);
      if (!lost_.empty()) return isa::reject(isa::ErrorCode::kDeviceLost, lost_);
      id = next_id_++;
      pending_[id] = pending;
    }
    send(type, id, payload, fd);  // a failure to send fails `pending` (lose(), writer thread)
    std::unique_lock lock(calls_mu_);
    calls_cv_.wait(lock, [&] { return pending->done; });
    if (!pending->reply) return pending->reply.error();
    const wire::Reply& r = pending->reply.value();
    if (r.code != isa::ErrorCode::kNone) return isa::reject(r.code, r.text, r.value, r.value2);
    return pending->reply;
  }

  isa::Status post(MessageType type, const std::vector<uint8_t>& payload) {
    {
      std::lock_guard lock(calls_mu_);
      if (!lost_.empty()) return isa::reject(isa::ErrorCode::kDeviceLost, lost_);
    }
    send(type, 0, payload, -1);
    return {};
  }

  // Sends one message without ever blocking the caller. The reader thread sends too (the
  // driver's interrupt handler posts register writes): had it blocked on a full socket while
  // the server blocked sending to us, neither would ever read again. So a message goes straight
  // onto the socket when it has room and nothing is queued before it; otherwise it (or its
  // rest) is queued, in order, for the writer thread. A failure is the writer thread's to
  // report (lose()), never the caller's: the caller may hold the driver's locks.
  void send(MessageType type, uint64_t id, const std::vector<uint8_t>& payload, int fd) {
    Outgoing out;
    out.bytes.resize(wire::kHeaderBytes + payload.size());
    wire::encode_header(wire::message_header(type, id, payload.size(), fd >= 0), out.bytes.data());
    if (!payload.empty()) {
      std::memcpy(out.bytes.data() + wire::kHeaderBytes, payload.data(), payload.size());
    }
    out.fd = fd;
    std::lock_guard lock(send_mu_);
    if (outbox_.empty() && send_error_.empty()) {
      const ssize_t n = send_some(out, MSG_DONTWAIT);
      if (n == static_cast<ssize_t>(out.bytes.size())) return;
      if (n > 0) {
        out.bytes.erase(out.bytes.begin(), out.bytes.begin() + n);
        out.fd = -1;  // it went with the first byte
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        send_error_ = std::string("the connection closed: ") + std::strerror(errno);
      }
    }
    outbox_.push_back(std::move(out));
    outbox_cv_.notify_one();
  }

  // One sendmsg() of what is left of `out` (its descriptor too, if not sent yet).
  ssize_t send_some(const Outgoing& out, int flags) {
    const iovec iov{const_cast<uint8_t*>(out.bytes.data()), out.bytes.size()};
    return wire::send_bytes(socket_.get(), &iov, 1, out.fd, flags);
  }

  // Drains the outbox in order, waiting for room on the socket as long as it takes; the first
  // message stays at the front while it is sent, so no sender can overtake it.
  void write_loop() {
    std::unique_lock lock(send_mu_);
    for (;;) {
      outbox_cv_.wait(lock, [&] { return stopping_ || !outbox_.empty() || !send_error_.empty(); });
      if (!send_error_.empty()) {
        const std::string why = send_error_;
        outbox_.clear();
        lock.unlock();
        // A closed connection may still hold the server's last word (a shutdown's kLost, with
        // its reason); the reader reports that when it reaches the end. Wait for it a while,
        // and report the send failure only if the reader has nothing to say.
        {
          std::unique_lock calls(calls_mu_);
          calls_cv_.wait_for(calls, std::chrono::seconds(2), [&] { return !lost_.empty(); });
        }
        lose(why);
        return;
      }
      if (outbox_.empty()) return;  // stopping
      Outgoing& front = outbox_.front();
      lock.unlock();
      const ssize_t n = send_some(front, 0);  // blocking
      lock.lock();
      if (n < 0) {
        send_error_ = std::string("the connection closed: ") + std::strerror(errno);
        continue;
      }
      if (n == static_cast<ssize_t>(front.bytes.size())) {
        outbox_.pop_front();
      } else {
        front.bytes.erase(front.bytes.begin(), front.bytes.begin() + n);
        front.fd = -1;
      }
    }
  }

  // The device is gone: fail every call waiting and tell the driver once.
  isa::Failure lose(const std::string& why) {
    const std::string reason = where_ + " is gone: " + why;
    bool first = false;
    {
      std::lock_guard lock(calls_mu_);
      if (lost_.empty()) {
        lost_ = reason;
        first = true;
      }
      for (auto& [id, p] : pending_) {
        p->done = true;
        p->reply = isa::reject(isa::ErrorCode::kDeviceLost, lost_);
      }
      pending_.clear();
    }
    calls_cv_.notify_all();
    if (first && !closing_) {
      // Before the hello, the open fails with this reason; no need to shout about it.
      logger()->log(window_ != nullptr ? spdlog::level::err : spdlog::level::debug, "{}", reason);
      std::lock_guard lock(handler_mu_);
      if (lost_handler_) lost_handler_(reason);
    }
    return isa::reject(isa::ErrorCode::kDeviceLost, reason);
  }

  void read_loop() {
    wire::MessageReader reader;
    for (;;) {
      isa::Result<wire::MessageReader::ReadState> got = reader.read_some(socket_.get());
      if (!got) {
        lose(got.error().reason);
        return;
      }
      for (;;) {
        isa::Result<std::optional<wire::Message>> m = reader.next();
        if (!m) {
          lose(m.error().reason);
          return;
        }
        if (!m.value()) break;
        if (isa::Status ok = dispatch(*m.value()); !ok) {
          lose(ok.error().reason);
          return;
        }
      }
      if (got.value() == wire::MessageReader::ReadState::kClosed) {
        lose("the connection closed");
        return;
      }
    }
  }

  isa::Status dispatch(wire::Message& m) {
    switch (m.header.type) {
      case MessageType::kReply: {
        isa::Result<wire::Reply> r = wire::decode_reply(m.payload.data(), m.payload.size());
        std::lock_guard lock(calls_mu_);
        auto it = pending_.find(m.header.request_id);
        if (it == pending_.end()) {
          return bad_argument(
              fmt::format("a reply to request {}, which is not waiting", m.header.request_id));
        }
        if (m.fd) hello_fd_ = std::move(m.fd);
        it->second->done = true;
        it->second->reply = std::move(r);
        pending_.erase(it);
        calls_cv_.notify_all();
        return {};
      }
      case MessageType::kInterrupt: {
        wire::PayloadReader in(m.payload.data(), m.payload.size(), m.header.type);
        MTIA_ASSIGN_OR_RETURN(const uint64_t mask, in.u64());
        MTIA_RETURN_IF_ERROR(in.finish());
        std::lock_guard lock(handler_mu_);
        if (interrupt_) interrupt_(mask);
        return {};
      }
      case MessageType::kLost:
        return isa::reject(isa::ErrorCode::kDeviceLost,
                           std::string(m.payload.begin(), m.payload.end()));
      default:
        return bad_argument("the server sent a client's message (" +
                            wire::message_type_name(static_cast<uint16_t>(m.header.type)) + ")");
    }
  }

  UniqueFd socket_;
  const pid_t owner_pid_ = getpid();    // the process that opened the connection
  std::atomic<bool> closing_{false};    // our own destructor closes the connection
  std::atomic<bool> initcheck_{false};  // the driver switched the sanitizer's initcheck on
  pid_t pid_ = -1;
  std::string where_;
  std::thread reader_;
  UniqueFd hello_fd_;  // the memory window's descriptor, from the hello reply (calls_mu_)

  uint8_t* window_ = nullptr;
  uint64_t window_addr_ = 0;
  uint64_t window_bytes_ = 0;

  std::mutex send_mu_;  // guards the outbox and the order of everything sent
  std::condition_variable outbox_cv_;
  std::deque<Outgoing> outbox_;
  std::string send_error_;  // why sending failed, for the writer thread to report
  bool stopping_ = false;
  std::thread writer_;
  std::mutex calls_mu_;
  std::condition_variable calls_cv_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::shared_ptr<Pending>> pending_;
  std::string lost_;

  // Recursive: a loss found while the interrupt handler runs (on the reader thread, under this
  // lock) reports itself on that same thread.
  std::recursive_mutex handler_mu_;
  std::function<void(uint64_t)> interrupt_;
  std::function<void(const std::string&)> lost_handler_;

  // alloc_host buffers by address, of every socket backend in the process: any device may map
  // another's (a peer copy's bounce buffer is reached by both devices).
  static inline std::mutex segments_mu_;
  static inline std::map<uint8_t*, Segment> segments_;
  std::map<uint64_t, uint64_t> bus_base_;  // bus address handed out -> the server's mapping
};

const bool registered = [] {
  const isa::Status added = driver::register_backend("socket", SocketBackend::open);
  assert(added && "backend 'socket' is registered once");
  return added.ok();
}();

}  // namespace
}  // namespace mtia::backends
