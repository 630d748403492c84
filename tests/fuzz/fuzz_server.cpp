// Bytes from a client on a live device server's socket. The input is sent as it is on a new
// connection to one long-running server (its device stays up across inputs), which answers or
// drops the client. Whatever the bytes, the server must not crash or hang, and a proper client
// (hello, a register read) must be served afterwards. The replies it sends are decoded too.
//
// Requests to write artifacts are turned into time queries first: their folder is the
// client's to choose, and a fuzzer would scatter files over the disk.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_check.h"
#include "mtia/isa/registers.h"
#include "mtia/server/device_server.h"
#include "mtia/wire/message_io.h"
#include "mtia/wire/protocol.h"

namespace isa = mtia::isa;
namespace srv = mtia::wire;

namespace {

struct Rig {
  std::string path;
  std::unique_ptr<mtia::server::DeviceServer> server;
  std::thread thread;

  Rig() {
    path =
        (std::filesystem::temp_directory_path() / ("mtia_fuzz_server_" + std::to_string(getpid())))
            .string();
    mtia::server::ServerOptions o;
    o.socket_path = path;
    o.device.timing = false;
    auto made = mtia::server::DeviceServer::create(o);
    FUZZ_CHECK(made.ok());
    server = std::move(made).value();
    thread = std::thread([this] { (void)server->run(false); });
  }
  ~Rig() {
    server->stop();
    thread.join();
  }

  int connect() const {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    return fd;
  }
};

Rig& rig() {
  static Rig r;
  return r;
}

// Sends `bytes`, ends the stream, and reads what the server says until it hangs up.
void send_and_drain(int fd, const std::vector<uint8_t>& bytes) {
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  mtia::wire::MessageReader reader;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    FUZZ_CHECK(::poll(&p, 1, 10000) == 1);  // the server answers or hangs up, never stalls
    auto got = reader.read_some(fd);
    if (!got) break;
    for (;;) {
      auto m = reader.next();
      if (!m || !m.value()) break;
      const auto& msg = *m.value();
      FUZZ_CHECK(msg.header.type == srv::MessageType::kReply ||
                 msg.header.type == srv::MessageType::kInterrupt ||
                 msg.header.type == srv::MessageType::kLost);
      if (msg.header.type == srv::MessageType::kReply) {
        FUZZ_CHECK(srv::decode_reply(msg.payload.data(), msg.payload.size()).ok());
      }
    }
    if (got.value() == mtia::wire::MessageReader::ReadState::kClosed) break;
  }
}

// The input with every artifacts request (at a message boundary) made a time query.
std::vector<uint8_t> defused(const uint8_t* data, size_t size) {
  std::vector<uint8_t> b(data, data + size);
  size_t at = 0;
  while (b.size() - at >= srv::kHeaderBytes) {
    auto h = srv::decode_header(b.data() + at);
    if (!h) break;
    if (h.value().type == srv::MessageType::kWriteArtifacts) {
      b[at + 6] = static_cast<uint8_t>(srv::MessageType::kNow);
    }
    if (h.value().payload_bytes > b.size() - at - srv::kHeaderBytes) break;
    at += srv::kHeaderBytes + h.value().payload_bytes;
  }
  return b;
}

// A proper client: hello, then a register read answered with the device's identity.
void check_served() {
  const int fd = rig().connect();
  srv::PayloadWriter hello;
  hello.u32(srv::kProtocolVersion).u32(0);
  FUZZ_CHECK(mtia::wire::send_message(fd, srv::MessageType::kHello, 1, hello.data().data(),
                                      hello.data().size())
                 .ok());
  srv::PayloadWriter read;
  read.u64(isa::reg::kDeviceId);
  FUZZ_CHECK(mtia::wire::send_message(fd, srv::MessageType::kReadRegister, 2, read.data().data(),
                                      read.data().size())
                 .ok());
  mtia::wire::MessageReader reader;
  int replies = 0;
  uint64_t id_value = 0;
  while (replies < 2) {
    pollfd p{fd, POLLIN, 0};
    FUZZ_CHECK(::poll(&p, 1, 10000) == 1);
    auto got = reader.read_some(fd);
    FUZZ_CHECK(got.ok() && got.value() != mtia::wire::MessageReader::ReadState::kClosed);
    for (;;) {
      auto m = reader.next();
      FUZZ_CHECK(m.ok());
      if (!m.value()) break;
      auto r = srv::decode_reply(m.value()->payload.data(), m.value()->payload.size());
      FUZZ_CHECK(r.ok() && r.value().code == isa::ErrorCode::kNone);
      if (++replies == 2) id_value = r.value().value;
    }
  }
  FUZZ_CHECK((id_value >> 32) == (isa::kDeviceIdMagic >> 32));
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t runs = 0;
  const int fd = rig().connect();
  send_and_drain(fd, defused(data, size));
  ::close(fd);
  if (++runs % 64 == 1) check_served();
  return 0;
}
