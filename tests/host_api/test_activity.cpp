// Activity records (mtia/activity.h) against the device's own trace: one record per packet of
// device work with the simulated times of the trace's packet slices, the calling thread's tag,
// the call that queued it; one record per public call; nothing once the observer is removed.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "device_helpers.h"
#include "mtia/activity.h"

using namespace mtia;
using Json = nlohmann::json;

namespace {

class Recorder final : public ActivityObserver {
 public:
  void on_device_submitted() noexcept override {
    std::lock_guard lock(mu);
    ++submitted;
  }
  void on_device_activity(const DeviceActivity& a) noexcept override {
    std::lock_guard lock(mu);
    device.push_back(a);
  }
  void on_runtime_call(const RuntimeCall& c) noexcept override {
    std::lock_guard lock(mu);
    calls.push_back(c);
  }

  std::mutex mu;
  int submitted = 0;
  std::vector<DeviceActivity> device;
  std::vector<RuntimeCall> calls;
};

uint64_t ps(const Json& us) {
  return static_cast<uint64_t>(std::llround(us.get<double>() * 1e6));
}

}  // namespace

TEST_CASE("an activity observer sees each packet with the trace's simulated times and each call",
          "[activity]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mtia_activity_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto rec = std::make_shared<Recorder>();
  constexpr uint64_t kBytes = 64 * 1024;
  std::vector<uint8_t> host(kBytes, 1);
  uint32_t side_queue = 0;
  uint32_t side_stream = 0;
  {
    DeviceOptions o;
    o.trace = TraceLevel::kKernels;
    Device dev = Device::open(o);
    set_activity_observer(dev, rec);
    DevicePtr a = dev.malloc(kBytes);
    set_activity_tag(7);
    dev.copy(a, host.data(), kBytes);  // host to device
    set_activity_tag(8);
    Stream s = dev.create_stream();
    side_queue = dev.hardware_queue(s);
    side_stream = s.id;
    dev.memset_async(a, 0, kBytes, s);  // a fill on the side stream
    dev.synchronize(s);
    set_activity_tag(0);
    DevicePtr b = dev.malloc(kBytes);
    dev.copy(b, a, kBytes);  // device to device
    dev.synchronize();
    set_activity_observer(dev, nullptr);
    dev.copy(b, host.data(), kBytes);  // not observed
    dev.synchronize();
    dev.write_artifacts(dir.string());
  }

  std::ifstream in(dir / "trace.json");
  REQUIRE(in);
  const Json trace = Json::parse(in);
  std::map<std::pair<uint64_t, uint64_t>, std::pair<uint64_t, uint64_t>> packets;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e.value("cat", "") == "packet") {
      packets[{e["args"]["queue"].get<uint64_t>(), e["args"]["seq"].get<uint64_t>()}] = {
          ps(e["ts"]), ps(e["ts"]) + ps(e["dur"])};
    }
  }

  std::lock_guard lock(rec->mu);
  REQUIRE(rec->device.size() == 3);
  CHECK(rec->submitted == 3);
  const DeviceActivity& up = rec->device[0];
  const DeviceActivity& fill = rec->device[1];
  const DeviceActivity& d2d = rec->device[2];
  CHECK(up.kind == ActivityKind::kCopy);
  CHECK(up.name == "copy host to device");
  CHECK(up.tag == 7);
  CHECK(up.stream == 0);
  CHECK(fill.kind == ActivityKind::kFill);
  CHECK(fill.tag == 8);
  CHECK(fill.stream == side_stream);
  CHECK(fill.queue == side_queue);
  CHECK(d2d.name == "copy device to device");
  CHECK(d2d.tag == 0);
  std::map<uint64_t, const RuntimeCall*> calls;
  for (const RuntimeCall& c : rec->calls) calls[c.id] = &c;
  for (const DeviceActivity& a : rec->device) {
    INFO(a.name);
    CHECK(a.ok);
    CHECK(a.bytes == kBytes);
    CHECK(a.end_ps > a.start_ps);
    const auto it = packets.find({a.queue, a.seq});
    REQUIRE(it != packets.end());
    CHECK(a.start_ps == it->second.first);
    CHECK(a.end_ps == it->second.second);
    REQUIRE(calls.contains(a.call));
    const RuntimeCall& c = *calls[a.call];
    CHECK(c.tag == a.tag);
    CHECK(c.start_ns <= a.submit_ns);
    CHECK(a.submit_ns <= c.end_ns);
  }
  CHECK(std::string(calls[up.call]->name) == "copy");
  CHECK(std::string(calls[fill.call]->name) == "fill_async");
  // Calls without device work are reported too; nothing after the observer was removed.
  int copies = 0;
  int mallocs = 0;
  for (const RuntimeCall& c : rec->calls) {
    copies += std::string(c.name) == "copy";
    mallocs += std::string(c.name) == "malloc";
    CHECK(c.end_ns >= c.start_ns);
    CHECK_FALSE(c.threw);
  }
  CHECK(copies == 2);
  CHECK(mallocs == 2);
  std::filesystem::remove_all(dir);
}
