// mtia-emu serve: one emulated device in this process, served over a Unix-domain socket.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "mtia/error.h"
#include "mtia/server/device_server.h"
#include "mtia/trace.h"

namespace mtia::tools {

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "serve",
      "run one device in this process and serve it to clients over a Unix-domain socket "
      "(clients: MTIA_EMU_SERVER=PATH, or DeviceOptions::server)");
  struct Flags {
    DeviceFlags device;
    std::string socket;
    int fd = -1;
  };
  auto flags = std::make_shared<Flags>();
  cmd->add_option("--socket", flags->socket, "listen on this socket path");
  cmd->add_option("--fd", flags->fd,
                  "serve the connected socket inherited as this descriptor, and exit when its "
                  "client has gone (how a program starts a server of its own)")
      ->check(CLI::NonNegativeNumber);
  flags->device.add_to(*cmd);
  cmd->callback([flags] {
    if (flags->socket.empty() && flags->fd < 0) {
      throw CLI::ValidationError("serve", "give --socket PATH (or --fd N)");
    }
    const DeviceOptions o = flags->device.options();
    server::ServerOptions so;
    so.socket_path = flags->socket;
    so.client_fd = flags->fd;
    so.exit_with_client = flags->fd >= 0;
    so.device.preset = o.preset;
    so.device.overrides = o.overrides;
    so.device.timing = o.timing;
    if (o.trace) {
      so.device.trace.level = *o.trace;
    } else if (const char* env = std::getenv("MTIA_EMU_TRACE"); env != nullptr && *env != 0) {
      if (auto level = parse_trace_level(env)) so.device.trace.level = *level;
    }
    if (const char* env = std::getenv("MTIA_EMU_TRACE_MAX_EVENTS"); env != nullptr && *env != 0) {
      so.device.trace.max_events = std::strtoull(env, nullptr, 10);
    }
    if (const char* env = std::getenv("MTIA_EMU_WAIT"); env != nullptr && *env != 0) {
      if (auto w = parse_wait_policy(env)) so.device.wait = *w;
    }
    isa::Result<std::unique_ptr<server::DeviceServer>> made = server::DeviceServer::create(so);
    if (!made) {
      throw Error(made.error().code == isa::ErrorCode::kInvalidArgument
                      ? ErrorKind::kInvalidArgument
                      : ErrorKind::kDeviceUnavailable,
                  "cannot serve the device: " + made.error().reason);
    }
    if (!flags->socket.empty()) {
      std::printf("mtia-emu: serving %s on %s\n", o.preset.c_str(), flags->socket.c_str());
      std::fflush(stdout);
    }
    isa::Status ran = made.value()->run(/*handle_signals=*/true);
    if (!ran)
      throw Error(ErrorKind::kDeviceLost, "the served device was lost: " + ran.error().reason);
  });
}

}  // namespace mtia::tools
