// The device server (`mtia-emu serve`) and its clients: one client at a time, a client that
// dies or misbehaves is dropped and the device goes on, a server that dies is an error for its
// clients within a second, SIGTERM ends it cleanly, and a server started for a process never
// outlives it.
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "device_helpers.h"
#include "mtia/isa/server_protocol.h"

extern char** environ;

using namespace mtia;
using namespace std::chrono_literals;
using mtia::test::expect_error;

namespace {

// Starts a program; returns its pid.
pid_t start(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
  return pid;
}

// Waits at most `limit` for `pid` to exit; its exit status, or -1 if it is still running.
int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(5ms);
  }
}

int connect_to(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A device server on a socket of its own, stopped (SIGKILL) at the end of the test.
struct Server {
  std::string path;
  pid_t pid = -1;

  Server() {
    path = (std::filesystem::temp_directory_path() /
            ("mtia_server_test_" + std::to_string(getpid()) + "_" + std::to_string(counter()++)))
               .string();
    pid = start({MTIA_EMU_PROGRAM, "serve", "--socket", path, "--no-timing", "--trace", "off"});
    for (int i = 0; i < 1000; ++i) {  // until it accepts
      const int fd = connect_to(path);
      if (fd >= 0) {
        ::close(fd);
        return;
      }
      std::this_thread::sleep_for(5ms);
    }
    FAIL("the device server did not start listening on " << path);
  }
  ~Server() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  DeviceOptions options() const {
    DeviceOptions o;
    o.backend = "socket";
    o.server = path;
    o.timing = false;
    return o;
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

// The pids of `parent`'s children.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> kids;
  DIR* proc = opendir("/proc");
  while (dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) kids.push_back(pid);
  }
  closedir(proc);
  return kids;
}

bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line[paren + 2] != 'Z';
}

}  // namespace

TEST_CASE("a served device serves one client at a time, then the next", "[server]") {
  Server server;
  {
    Device first = Device::open(server.options());
    CHECK(first.properties().backend == "socket");
    CHECK_FALSE(first.properties().timing);  // the server's setting, whatever the client asked
    test::check_device_works(first);
    expect_error(ErrorKind::kDeviceUnavailable, "in use by another client",
                 [&] { Device::open(server.options()); });
    test::check_device_works(first);
  }
  Device second = Device::open(server.options());
  test::check_device_works(second);
}

TEST_CASE("a pinned buffer is shared with the server: copies never cross the socket", "[server]") {
  Server server;
  Device dev = Device::open(server.options());
  const size_t n = 3 << 20;
  auto* pinned = static_cast<uint8_t*>(dev.host_alloc(n));
  for (size_t i = 0; i < n; ++i) pinned[i] = static_cast<uint8_t>(i * 13 + 5);
  DevicePtr d = dev.malloc(n);
  dev.copy(d, pinned, n);
  std::vector<uint8_t> back(n);
  dev.copy(back.data(), d, n);  // pageable: staged through shared memory
  CHECK(std::equal(back.begin(), back.end(), pinned));
  // Part of a pinned buffer maps too (an offset into its memory file).
  std::memset(pinned, 0, n);
  dev.copy(pinned + 4096 + 8, d, n - 8192);
  CHECK(pinned[4096 + 8] == static_cast<uint8_t>(5));
  CHECK(pinned[4096 + 9] == static_cast<uint8_t>(18));
  dev.free(d);
  dev.host_free(pinned);
}

TEST_CASE("a server killed under a waiting client is an error within a second", "[server]") {
  Server server;
  Device dev = Device::open(server.options());
  test::Gate gate(dev);
  Stream s = dev.create_stream();
  DevicePtr d = dev.malloc(256);
  gate.hold(s);
  dev.memset_async(d, 1, 256, s);  // held on the device
  auto waiting = std::async(std::launch::async, [&] {
    try {
      dev.synchronize(s);
      return std::string("returned");
    } catch (const Error& e) {
      return std::string(error_kind_name(e.kind())) + ": " + e.what();
    }
  });
  CHECK(waiting.wait_for(100ms) == std::future_status::timeout);
  const auto killed = std::chrono::steady_clock::now();
  kill(server.pid, SIGKILL);
  REQUIRE(waiting.wait_for(5s) == std::future_status::ready);
  CHECK(std::chrono::steady_clock::now() - killed < 1s);
  const std::string what = waiting.get();
  CHECK_THAT(what, Catch::Contains("device lost"));
  CHECK_THAT(what, Catch::Contains("gone"));
  // Every later call says so too, and closing the device does not hang.
  expect_error(ErrorKind::kDeviceLost, "gone", [&] { dev.memset(d, 0, 256); });
}

TEST_CASE("malformed messages drop that client and the server serves on", "[server]") {
  Server server;
  Device holder = Device::open(server.options());
  auto garbage = [&](const std::vector<uint8_t>& bytes) {
    const int fd = connect_to(server.path);
    REQUIRE(fd >= 0);
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);  // and nothing more comes
    // The server hangs up on it: reading sees the end of the stream.
    char c;
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const ssize_t n = ::recv(fd, &c, 1, 0);
    CHECK(n <= 0);
    ::close(fd);
  };
  SECTION("not the protocol at all") {
    garbage(std::vector<uint8_t>(64, 'x'));
  }
  SECTION("a request before the hello") {
    std::vector<uint8_t> h(isa::server::kHeaderBytes + 8, 0);
    isa::server::encode_header({isa::server::MessageType::kReadRegister, 0, 1, 8}, h.data());
    garbage(h);
  }
  SECTION("a truncated message, then the connection closes") {
    std::vector<uint8_t> h(isa::server::kHeaderBytes + 3, 0);
    isa::server::encode_header({isa::server::MessageType::kHello, 0, 1, 8}, h.data());
    garbage(h);
  }
  SECTION("a payload over the limit") {
    std::vector<uint8_t> h(isa::server::kHeaderBytes, 0);
    isa::server::encode_header({isa::server::MessageType::kWriteMemory, 0, 1, 1ull << 40},
                               h.data());
    garbage(h);
  }
  test::check_device_works(holder);  // the client holding the device never noticed
}

TEST_CASE("a client killed in mid-work is released and the next client gets the device",
          "[server]") {
  Server server;
  // A client process that keeps the device busy: the demo workload on the served device.
  setenv("MTIA_EMU_SERVER", server.path.c_str(), 1);
  const std::string out = server.path + ".demo";
  const pid_t client = start({MTIA_EMU_PROGRAM, "demo", "--trace", "off", "--batch", "512",
                              "--hidden", "1024", "--out", out});
  unsetenv("MTIA_EMU_SERVER");
  // Wait until it holds the device (a second client is refused while it does).
  bool held = false;
  for (int i = 0; i < 400 && !held; ++i) {
    try {
      Device probe = Device::open(server.options());
    } catch (const Error& e) {
      held = std::string(e.what()).find("in use") != std::string::npos;
    }
    if (!held) std::this_thread::sleep_for(5ms);
  }
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  if (!held) WARN("the demo finished before it could be killed mid-work");
  std::filesystem::remove_all(out);
  Device next = Device::open(server.options());  // the dead client's hold is gone
  test::check_device_works(next);
}

TEST_CASE("SIGTERM lets queued work finish, tells the client, and exits cleanly", "[server]") {
  Server server;
  Device dev = Device::open(server.options());
  DevicePtr d = dev.malloc(1 << 20);
  dev.memset_async(d, 7, 1 << 20);
  kill(server.pid, SIGTERM);
  CHECK(wait_exit(server.pid, 10s) == 0);
  server.pid = -1;
  expect_error(ErrorKind::kDeviceLost, "shut down", [&] { dev.synchronize(); });
  CHECK_FALSE(std::filesystem::exists(server.path));  // it removed its socket
}

TEST_CASE("a server started for a process never outlives it", "[server]") {
  // The demo with MTIA_EMU_DEVICES=1 starts its own server; kill the demo and its server goes.
  const std::string out = std::filesystem::temp_directory_path() /
                          ("mtia_server_test_demo_" + std::to_string(getpid()));
  setenv("MTIA_EMU_DEVICES", "1", 1);
  const pid_t client = start({MTIA_EMU_PROGRAM, "demo", "--trace", "off", "--out", out});
  unsetenv("MTIA_EMU_DEVICES");
  std::vector<pid_t> servers;
  for (int i = 0; i < 400 && servers.empty(); ++i) {
    servers = children_of(client);
    if (servers.empty()) std::this_thread::sleep_for(5ms);
  }
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  REQUIRE_FALSE(servers.empty());
  bool gone = false;
  for (int i = 0; i < 400 && !gone; ++i) {
    gone = !alive(servers[0]);
    if (!gone) std::this_thread::sleep_for(5ms);
  }
  CHECK(gone);
  std::filesystem::remove_all(out);
}

TEST_CASE("bad server options say what is wrong", "[server]") {
  DeviceOptions o;
  o.backend = "socket";
  o.server = "/nonexistent/mtia.sock";
  expect_error(ErrorKind::kDeviceUnavailable, "mtia-emu serve --socket", [&] { Device::open(o); });
  o.backend = "inprocess";
  expect_error(ErrorKind::kInvalidArgument, "use backend \"socket\"", [&] { Device::open(o); });
  DeviceOptions far;
  far.index = 3;
  expect_error(ErrorKind::kInvalidArgument, "device index 3 does not exist",
               [&] { Device::open(far); });
  setenv("MTIA_EMU_DEVICES", "zero", 1);
  expect_error(ErrorKind::kInvalidArgument, "MTIA_EMU_DEVICES='zero'", [&] { device_count(); });
  unsetenv("MTIA_EMU_DEVICES");
}
