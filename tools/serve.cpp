// mtia-emu serve: one emulated device in this process, served over a Unix-domain socket.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "commands.h"
#include "mtia/error.h"
#include "mtia/server/device_server.h"
#include "mtia/settings/settings.h"
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
    std::optional<uint32_t> unit_threads;
    std::optional<uint64_t> inline_work_ns;
    std::optional<bool> lazy_loads;
    uint64_t trace_max_events = 0;
    std::string wait;
    uint32_t clients = 1;
  };
  auto flags = std::make_shared<Flags>();
  cmd->add_option("--socket", flags->socket, "listen on this socket path");
  cmd->add_option("--fd", flags->fd,
                  "serve the connected socket inherited as this descriptor, and exit when its "
                  "client has gone (how a program starts a server of its own)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--clients", flags->clients,
                  "serve this many clients at once, each in a context of its own with an equal "
                  "share of the hardware queues and DRAM (default 1)")
      ->check(CLI::Range(1u, 16u));
  flags->device.add_to(*cmd);
  cmd->add_option("--trace-max-events", flags->trace_max_events,
                  "trace events kept at most (default $MTIA_EMU_TRACE_MAX_EVENTS, else 1,000,000)");
  cmd->add_option("--wait", flags->wait,
                  "how the simulator thread waits for requests: auto, spin, yield or block "
                  "(default $MTIA_EMU_WAIT, else auto)")
      ->check(CLI::IsMember({"auto", "spin", "yield", "block"}));
  cmd->add_option("--unit-threads", flags->unit_threads,
                  "host threads for PE unit work beside the simulator thread, 0..256 (default "
                  "$MTIA_EMU_UNIT_THREADS, else host cores - 1, at most 6)");
  cmd->add_option("--inline-work-ns", flags->inline_work_ns,
                  "unit work estimated below this many ns runs on the simulator thread (default "
                  "$MTIA_EMU_INLINE_WORK_NS, else 5000)");
  cmd->add_option("--lazy-loads", flags->lazy_loads,
                  "leave PE DMA loads in device memory until their bytes are needed, 0 or 1 "
                  "(default $MTIA_EMU_LAZY_LOADS, else 1)");
  cmd->callback([flags] {
    if (flags->socket.empty() && flags->fd < 0) {
      throw CLI::ValidationError("serve", "give --socket PATH (or --fd N)");
    }
    const DeviceOptions o = flags->device.options();
    server::ServerOptions so;
    so.socket_path = flags->socket;
    so.client_fd = flags->fd;
    so.exit_with_client = flags->fd >= 0;
    so.clients = flags->clients;
    so.device.preset = o.preset;
    so.device.overrides = o.overrides;
    so.device.timing = o.timing;
    so.device.unit_threads = flags->unit_threads;
    so.device.inline_work_ns = flags->inline_work_ns;
    so.device.lazy_loads = flags->lazy_loads;
    if (o.trace) {
      so.device.trace.level = *o.trace;
    } else if (auto env = settings::read("MTIA_EMU_TRACE")) {
      if (auto level = parse_trace_level(*env)) so.device.trace.level = *level;
    }
    so.device.trace.max_events = flags->trace_max_events;
    if (auto env = settings::read("MTIA_EMU_TRACE_MAX_EVENTS");
        so.device.trace.max_events == 0 && env) {
      so.device.trace.max_events = std::strtoull(env->c_str(), nullptr, 10);
    }
    if (so.device.trace.max_events == 0) so.device.trace.max_events = kDefaultTraceMaxEvents;
    const std::string wait =
        !flags->wait.empty() ? flags->wait : settings::read("MTIA_EMU_WAIT").value_or("");
    if (!wait.empty()) {
      if (auto w = parse_wait_policy(wait)) so.device.wait = *w;
    }
    auto cannot_serve = [](const isa::Failure& f) {
      return Error(f.code == isa::ErrorCode::kInvalidArgument ? ErrorKind::kInvalidArgument
                                                              : ErrorKind::kDeviceUnavailable,
                   "cannot serve the device: " + f.reason);
    };
    isa::Result<std::unique_ptr<server::DeviceServer>> made = server::DeviceServer::create(so);
    if (!made) throw cannot_serve(made.error());
    if (!flags->socket.empty()) {
      std::printf("mtia-emu: serving %s on %s to %u client%s at once\n", o.preset.c_str(),
                  flags->socket.c_str(), flags->clients, flags->clients == 1 ? "" : "s");
      std::fflush(stdout);
    }
    isa::Status ran = made.value()->run(/*handle_signals=*/true);
    // A server started for one client (--fd) has told that client why; nothing to print.
    if (!ran && flags->fd >= 0) throw CLI::RuntimeError(1);
    if (!ran && ran.error().code == isa::ErrorCode::kDeviceLost) {
      throw Error(ErrorKind::kDeviceLost, "the served device was lost: " + ran.error().reason);
    }
    if (!ran) throw cannot_serve(ran.error());
  });
}

}  // namespace mtia::tools
