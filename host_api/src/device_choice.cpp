#include "device_choice.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "mtia/driver/backend.h"
#include "mtia/error.h"
#include "mtia/settings/settings.h"

namespace mtia {
namespace {

constexpr int kMaxDevices = 64;

std::string env(const char* name) {
  return settings::read(name).value_or("");
}

// $MTIA_EMU_SERVER's paths, in order.
std::vector<std::string> server_paths() {
  std::vector<std::string> paths;
  const std::string list = env("MTIA_EMU_SERVER");
  size_t at = 0;
  while (at <= list.size() && !list.empty()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    std::string path = list.substr(at, comma - at);
    if (path.empty()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("MTIA_EMU_SERVER='{}' has an empty path; give socket paths "
                              "separated by commas",
                              list));
    }
    paths.push_back(std::move(path));
    at = comma + 1;
  }
  return paths;
}

// $MTIA_EMU_DEVICES, or 0 when unset.
int spawned_devices() {
  const std::string text = env("MTIA_EMU_DEVICES");
  if (text.empty()) return 0;
  char* end = nullptr;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != 0 || n < 1 || n > kMaxDevices) {
    throw Error(
        ErrorKind::kInvalidArgument,
        fmt::format("MTIA_EMU_DEVICES='{}' is not a device count from 1 to {}", text, kMaxDevices));
  }
  return static_cast<int>(n);
}

void check_known(const std::string& backend, ErrorKind kind) {
  const auto names = driver::backend_names();
  if (std::find(names.begin(), names.end(), backend) != names.end()) return;
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw Error(
      kind,
      fmt::format("unknown device backend '{}'; known backends: {}", backend,
                  known.empty() ? "none (link the program with mtia_backend_inprocess)" : known));
}

}  // namespace

int count_devices(const std::string& backend) {
  if (!backend.empty()) check_known(backend, ErrorKind::kInvalidArgument);
  if (backend == "inprocess") return 1;
  if (const auto paths = server_paths(); !paths.empty()) return static_cast<int>(paths.size());
  if (const int n = spawned_devices(); n > 0) return n;
  return 1;
}

DeviceChoice choose_device(const DeviceOptions& o) {
  DeviceChoice c;
  c.backend = o.backend;
  c.server = o.server;
  if (c.backend.empty()) {
    const auto paths = server_paths();
    if (!paths.empty()) {
      c.backend = "socket";
    } else if (spawned_devices() > 0) {
      c.backend = "socket";
    } else {
      c.backend = "inprocess";
    }
  }
  check_known(c.backend, ErrorKind::kDeviceUnavailable);
  if (!o.server.empty() && c.backend != "socket") {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("DeviceOptions::server names a device server, but the backend is "
                            "'{}'; use backend \"socket\" (or leave it empty)",
                            c.backend));
  }
  if (!o.server.empty()) {
    if (o.index != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("device index {} with DeviceOptions::server: a server serves one "
                              "device, index 0",
                              o.index));
    }
    return c;
  }
  const int count = count_devices(c.backend);
  if (o.index >= static_cast<uint32_t>(count)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("device index {} does not exist: this process has {} device{} ({})",
                            o.index, count, count == 1 ? "" : "s",
                            c.backend == "inprocess"
                                ? "the in-process backend runs one; set MTIA_EMU_DEVICES=N "
                                  "for N devices in their own processes"
                                : "set by MTIA_EMU_SERVER or MTIA_EMU_DEVICES"));
  }
  if (c.backend == "socket") {
    const auto paths = server_paths();
    if (!paths.empty()) c.server = paths[o.index];
  }
  return c;
}

}  // namespace mtia
