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
#include "mtia/raw_packet.h"
#include "mtia/wire/protocol.h"

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

  explicit Server(int clients = 1) {
    path = (std::filesystem::temp_directory_path() /
            ("mtia_server_test_" + std::to_string(getpid()) + "_" + std::to_string(counter()++)))
               .string();
    pid = start({MTIA_EMU_PROGRAM, "serve", "--socket", path, "--no-timing", "--trace", "off",
                 "--clients", std::to_string(clients)});
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
    std::error_code ignored;  // a killed server leaves its socket file behind
    std::filesystem::remove(path, ignored);
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

// A client process that keeps the device busy: the demo workload on `server`, writing into
// `out`. Returns once the server refuses another client ("in use"), so it holds a share, or
// after 2 s, if the demo finished first (held is then false).
struct BusyClient {
  pid_t pid = -1;
  bool held = false;
};
BusyClient start_busy_client(const Server& server, const std::string& out) {
  setenv("MTIA_EMU_SERVER", server.path.c_str(), 1);
  BusyClient c;
  c.pid = start({MTIA_EMU_PROGRAM, "demo", "--trace", "off", "--batch", "512", "--hidden", "1024",
                 "--out", out});
  unsetenv("MTIA_EMU_SERVER");
  for (int i = 0; i < 400 && !c.held; ++i) {
    try {
      Device probe = Device::open(server.options());
    } catch (const Error& e) {
      c.held = std::string(e.what()).find("in use") != std::string::npos;
    }
    if (!c.held) std::this_thread::sleep_for(5ms);
  }
  return c;
}

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
    std::vector<uint8_t> h(wire::kHeaderBytes + 8, 0);
    wire::encode_header({wire::MessageType::kReadRegister, 0, 1, 8}, h.data());
    garbage(h);
  }
  SECTION("a truncated message, then the connection closes") {
    std::vector<uint8_t> h(wire::kHeaderBytes + 3, 0);
    wire::encode_header({wire::MessageType::kHello, 0, 1, 8}, h.data());
    garbage(h);
  }
  SECTION("a payload over the limit") {
    std::vector<uint8_t> h(wire::kHeaderBytes, 0);
    wire::encode_header({wire::MessageType::kWriteMemory, 0, 1, 1ull << 40}, h.data());
    garbage(h);
  }
  test::check_device_works(holder);  // the client holding the device never noticed
}

TEST_CASE("a client killed in mid-work is released and the next client gets the device",
          "[server]") {
  Server server;
  const std::string out = server.path + ".demo";
  const BusyClient client = start_busy_client(server, out);
  kill(client.pid, SIGKILL);
  waitpid(client.pid, nullptr, 0);
  if (!client.held) WARN("the demo finished before it could be killed mid-work");
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

// --- several clients at once ------------------------------------------------------------------

namespace {

constexpr uint8_t kFp32 = 1;  // MTIA_PE_DT_FP32 (isa/pe/pe_ops.h)

// A DMA copy of `bytes` bytes between two device addresses.
isa::DmaCopyPacket raw_copy(uint64_t dst, uint64_t src, uint64_t bytes) {
  isa::DmaCopyPacket p{};
  p.ndims = 1;
  p.elem_size = 1;
  p.sizes[0] = bytes;
  p.src.addr = src;
  p.src.strides[0] = 1;
  p.src.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
  p.dst = p.src;
  p.dst.addr = dst;
  return p;
}

std::vector<uint8_t> read_back(Device& dev, DevicePtr p, size_t n) {
  std::vector<uint8_t> out(n);
  dev.copy(out.data(), p, n);
  return out;
}

}  // namespace

TEST_CASE("a server with --clients serves several clients at once, each with its own share",
          "[server][contexts]") {
  Server server(2);
  Device a = Device::open(server.options());
  Device b = Device::open(server.options());
  // Each client sees its share: half of the 8 queues and of the 128 GiB of DRAM.
  CHECK(a.properties().hardware_queues == 4);
  CHECK(b.properties().hardware_queues == 4);
  CHECK(a.properties().dram_bytes == 64ull << 30);
  CHECK(b.properties().dram_bytes == 64ull << 30);
  expect_error(ErrorKind::kDeviceUnavailable, "serves 2 clients at once",
               [&] { Device::open(server.options()); });
  // Both work at once, from their own threads, on their own streams.
  auto work = [](Device& dev, int seed) {
    Stream s = dev.create_stream();
    for (int round = 0; round < 20; ++round) {
      std::vector<int32_t> in(4096), out(4096);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(i * seed + round);
      DevicePtr d = dev.malloc(in.size() * 4);
      dev.copy(d, in.data(), in.size() * 4, s);
      dev.copy(out.data(), d, out.size() * 4, s);
      dev.free(d);
      if (out != in) return false;
      test::check_device_works(dev, s);
    }
    return true;
  };
  auto on_a = std::async(std::launch::async, [&] { return work(a, 3); });
  auto on_b = std::async(std::launch::async, [&] { return work(b, 5); });
  CHECK(on_a.get());
  CHECK(on_b.get());
}

TEST_CASE("a one-client server runs the sanitizer for its client; one of several clients refuses",
          "[server][contexts]") {
  // The smoke kernel told one element more than its input holds reads into the next
  // allocation: memcheck's finding, on the served device as on the in-process one.
  const std::vector<int32_t> in_data(384, 5);
  auto read_past = [&](Device& dev) {
    const KernelModule smoke = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
    DevicePtr in = test::upload(dev, in_data);
    DevicePtr neighbour = test::upload(dev, std::vector<int32_t>(256, 7));
    DevicePtr out = dev.malloc(4 * 512);
    REQUIRE(neighbour.address() == in.address() + 1536);
    dev.launch(smoke.entry_kernel(), {1, 2}, {in, out, int64_t{385}});
    dev.synchronize();
  };
  Server server;
  DeviceOptions sanitized = server.options();
  sanitized.sanitize = "memcheck,initcheck";
  {
    Device dev = Device::open(sanitized);
    CHECK(dev.properties().sanitize == "memcheck,initcheck");
    expect_error(ErrorKind::kDeviceFault, "memcheck: dma.start at pc 0x", [&] { read_past(dev); });
    // Bytes the host wrote (through the server: initcheck sees them) read clean.
    test::check_device_works(dev);
  }
  // The next client, without the sanitizer, finds it off: the same read passes.
  Device next = Device::open(server.options());
  read_past(next);
  test::check_device_works(next);

  Server shared(2);
  DeviceOptions o = shared.options();
  o.sanitize = "memcheck";
  expect_error(ErrorKind::kDeviceUnavailable,
               "cannot run the sanitizer's memcheck (it reports checks 0x0); it runs on the "
               "in-process device and on a device server that serves one client",
               [&] { Device::open(o); });
}

TEST_CASE("a client's DMA and kernels reach only its own memory, and the fault is its alone",
          "[server][contexts]") {
  Server server(2);
  Device a = Device::open(server.options());
  Device b = Device::open(server.options());
  constexpr size_t n = 4096;
  std::vector<uint8_t> secret(n);
  for (size_t i = 0; i < n; ++i) secret[i] = static_cast<uint8_t>(i * 31 + 7);
  DevicePtr theirs = a.malloc(n);
  a.copy(theirs, secret.data(), n);
  DevicePtr mine = b.malloc(n);
  b.memset(mine, 0x5A, n);
  const std::vector<uint8_t> mine_before = read_back(b, mine, n);

  SECTION("a DMA that reads another client's memory") {
    submit_raw_packet(b, Stream{}, raw_copy(mine.address(), theirs.address(), n));
    expect_error(ErrorKind::kDeviceFault, "outside device memory", [&] { b.synchronize(); });
    CHECK(read_back(b, mine, n) == mine_before);  // nothing of A's arrived
  }
  SECTION("a DMA that writes another client's memory") {
    submit_raw_packet(b, Stream{}, raw_copy(theirs.address(), mine.address(), n));
    expect_error(ErrorKind::kDeviceFault, "outside device memory", [&] { b.synchronize(); });
  }
  SECTION("a fence signal into another client's memory") {
    isa::SignalPacket p{};
    p.addr = theirs.address();
    p.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
    p.value = ~uint64_t{0};
    submit_raw_packet(b, Stream{}, p);
    expect_error(ErrorKind::kDeviceFault, "outside device memory", [&] { b.synchronize(); });
  }
#ifdef MTIA_KERNEL_LIBRARY_ELF
  SECTION("a kernel that reads or writes another client's memory") {
    const KernelModule lib = b.load_module(MTIA_KERNEL_LIBRARY_ELF);
    constexpr int64_t k = 16;  // 16 x 16 fp32 products: 1 KiB operands
    auto matmul = [&](DevicePtr out, DevicePtr in) {
      b.launch(lib.kernel("matmul"), Grid{1, 1},
               {out, in, in, Arg::dtype(kFp32), Arg::dtype(kFp32), k, k, k, k, int64_t{1}, k,
                int64_t{1}, k, int64_t{1}});
    };
    matmul(mine, theirs);  // reads A's bytes
    expect_error(ErrorKind::kDeviceFault, "may reach", [&] { b.synchronize(); });
    matmul(theirs, mine);  // writes A's bytes
    expect_error(ErrorKind::kDeviceFault, "may reach", [&] { b.synchronize(); });
    // The launch's own image and arguments must be the client's too.
    isa::LaunchPacket l{};
    l.image_addr = theirs.address();
    l.grid_rows = l.grid_cols = 1;
    submit_raw_packet(b, Stream{}, l);
    expect_error(ErrorKind::kDeviceFault, "outside", [&] { b.synchronize(); });
    matmul(mine, mine);  // and its own memory it still reaches
    b.synchronize();
  }
#endif
  // A never noticed: its data is intact and its device works.
  CHECK(read_back(a, theirs, n) == secret);
  test::check_device_works(a);
  test::check_device_works(b);  // B's fault was reported and is over
  a.free(theirs);
  b.free(mine);
}

TEST_CASE("a client killed in mid-work releases its share and the other client goes on",
          "[server][contexts]") {
  Server server(2);
  Device stays = Device::open(server.options());
  const std::string out = server.path + ".demo";
  const BusyClient client = start_busy_client(server, out);  // holds the second share
  test::check_device_works(stays);
  kill(client.pid, SIGKILL);
  waitpid(client.pid, nullptr, 0);
  if (!client.held) WARN("the demo finished before it could be killed mid-work");
  std::filesystem::remove_all(out);
  test::check_device_works(stays);
  // Its share is free again, and a new client finds its window zeroed.
  Device next = Device::open(server.options());
  DevicePtr p = next.malloc(1 << 20);
  std::vector<uint8_t> got(1 << 20, 0xFF);
  next.copy(got.data(), p, got.size());
  CHECK(std::all_of(got.begin(), got.end(), [](uint8_t v) { return v == 0; }));
  test::check_device_works(next);
}

TEST_CASE("bad --clients values say what is wrong", "[server][contexts]") {
  const pid_t too_many = start({MTIA_EMU_PROGRAM, "serve", "--socket", "/tmp/mtia-unused",
                                "--clients", "9", "--trace", "off"});
  CHECK(wait_exit(too_many, 30s) != 0);  // 8 queues serve at most 8 clients
  const pid_t tiny = start({MTIA_EMU_PROGRAM, "serve", "--socket", "/tmp/mtia-unused", "--clients",
                            "4", "--set", "dram_bytes=134217728", "--trace", "off"});
  CHECK(wait_exit(tiny, 30s) != 0);  // 32 MiB each is too little
}
