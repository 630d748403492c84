// The device server: one emulated device in its own process, served to clients over a
// Unix-domain socket with Boost.Asio (the protocol: wire/protocol.h). `mtia-emu serve`
// runs it; the driver's socket backend (backends/socket/) is its client.
//
// The server runs the device through the driver's Backend interface (the in-process backend),
// so it is a thin adapter between the socket and what a PCIe device offers: register reads and
// writes, the device-memory window (DRAM shared as a memfd), host memory for DMA (the client's
// memfds, mapped here), interrupts, and the trace channel.
//
// Up to ServerOptions::clients clients use the device at once, each in a context of its own (a
// share of the hardware queues, a DRAM window with its own memory file, its host memory), as
// PCIe virtual functions share a card: a client's DMA and kernels reach nothing of another's;
// anything else faults, for that client alone. While every share is taken, another client's
// hello is refused with kDeviceUnavailable. A client that disconnects, is killed or sends a
// malformed message is dropped at once: its queues are reset (queued and waiting work is
// dropped), its host memory is released (work already running cannot reach it any more), its
// window is cleared, and the next client gets the share as a fresh device.
#pragma once

#include <memory>
#include <string>

#include "mtia/driver/backend.h"
#include "mtia/isa/result.h"

namespace mtia::server {

struct ServerOptions {
  // Listen for clients on this Unix-domain socket path (an existing socket file there is
  // replaced; the file is removed at exit). Empty: serve only `client_fd`.
  std::string socket_path;
  // A connected socket to serve as the first client (the other end of a socketpair made by
  // the program that started this server); -1 for none. The server owns it.
  int client_fd = -1;
  // Stop once `client_fd`'s client has gone (a server started for one client process never
  // outlives it, even if that process is killed).
  bool exit_with_client = false;
  // How many clients the device serves at once, 1..its hardware queues. Each gets an equal
  // share of the queues and of DRAM (rounded down to 2 MiB, at least 64 MiB).
  uint32_t clients = 1;
  // The device to run (preset, overrides, timing, trace, wait policy, PE-grid host options).
  driver::BackendOptions device;
};

class DeviceServer {
 public:
  // Builds the device and binds the socket. kInvalidArgument for bad device options or neither
  // a socket path nor a client fd; kDeviceUnavailable if the device cannot be built or the
  // socket cannot be bound (the reason says why). With a `client_fd`, a device that cannot be
  // built is instead that client's answer: run() tells it and fails with the same failure.
  static isa::Result<std::unique_ptr<DeviceServer>> create(ServerOptions options);
  ~DeviceServer();

  // Serves until stop(), SIGTERM or SIGINT (when `handle_signals`), the exit_with_client
  // client leaving, or the device being lost (then it fails with kDeviceLost naming why). On
  // a stop or signal it first lets the work already queued finish, then tells each client the
  // device is going away.
  isa::Status run(bool handle_signals);
  // Asks run() to finish (any thread).
  void stop();

 private:
  struct Impl;
  explicit DeviceServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtia::server
