// The Kineto activity profiler of the emulated device (profiler.h, docs/profiling.md).
//
// PyTorch's profiler asks Kineto for the MTIA activity types when ProfilerActivity.MTIA is
// requested; Kineto then configures every registered child profiler, starts its session with
// the profile, pushes each operator's correlation id to it (on the operator's thread) and, at
// the end, asks it for its activities. This session
//  * keeps the calling thread's innermost correlation id as the host API's activity tag
//    (mtia::set_activity_tag), so every call and packet a thread issues names its operator;
//  * installs an observer on every open device (and on devices opened during the profile),
//    which collects each public host API call (a runtime activity on the calling thread) and
//    each completed packet of device work (a device activity on the row of its device and
//    stream) with the simulated start and end the device wrote for it;
//  * places device work on the host clock (below) and hands everything to Kineto, each device
//    activity linked to its operator (Kineto's `linked`, PyTorch's linked correlation id) and to
//    its runtime call by a shared correlation id and a flow arrow.
//
// Clock mapping, per device: host = origin + (start_ps + offset_ps) / 1000, where origin is the
// host wall clock when the session started and offset_ps only grows: each packet, in the order
// the device completes them, raises it to at least its submission time minus its simulated
// start. So a device activity lasts exactly its simulated duration, never starts before the
// call that submitted it, and the device's timeline never runs backwards; while the device is
// the bottleneck (work queued ahead of it) simulated gaps are kept as they are.
#include "profiler.h"

#include <c10/util/Exception.h>
#include <kineto/IActivityProfiler.h>
#include <kineto/libkineto.h>
#include <kineto/output_base.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "devices.h"
#include "mtia/activity.h"
#include "mtia/settings/settings.h"
#include "torch_logger.h"

namespace mtia::torch_backend {

namespace {

using libkineto::ActivityType;

// Correlation ids of the runtime calls and their device work: kept apart from the operators'
// ids (which count up from 1), so that PyTorch never mistakes one for the other.
constexpr int32_t kCorrelationBase = int32_t{1} << 30;
// Records one session keeps at most (about 200 bytes each) unless
// $MTIA_EMU_PROFILER_MAX_RECORDS says otherwise; past this they are counted as dropped and the
// session reports it.
constexpr size_t kDefaultMaxRecords = 4'000'000;

size_t max_records() {
  const std::optional<std::string> value = mtia::settings::read("MTIA_EMU_PROFILER_MAX_RECORDS");
  if (!value) return kDefaultMaxRecords;
  const char* text = value->c_str();
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text, &end, 10);
  if (end == text || *end != 0) {
    log::warn(std::string("torch_mtia_emu: MTIA_EMU_PROFILER_MAX_RECORDS='") + text +
              "' is not a number of records; keeping at most " +
              std::to_string(kDefaultMaxRecords));
    return kDefaultMaxRecords;
  }
  return static_cast<size_t>(n);
}

int32_t correlation_of(uint64_t call) {
  return call == 0 ? 0 : kCorrelationBase + static_cast<int32_t>(call % (uint64_t{1} << 30));
}

struct DeviceRecord {
  mtia::DeviceActivity activity;
  int64_t start_ns = 0;  // on the host clock (the mapping above)
  int64_t end_ns = 0;
};

struct RuntimeRecord {
  mtia::RuntimeCall call;
  int32_t thread = 0;  // libkineto::systemThreadId() of the calling thread
};

// What one session collects; shared with the observers it installs, which may outlive it
// (work submitted during the profile completes later).
class Collector final : public mtia::ActivityObserver {
 public:
  Collector(bool device, bool runtime, size_t max_records)
      : want_device_(device), want_runtime_(runtime), max_records_(max_records) {}

  void on_device_submitted() noexcept override {
    std::lock_guard lock(mu_);
    ++submitted_;
  }

  void on_device_activity(const mtia::DeviceActivity& a) noexcept override {
    std::lock_guard lock(mu_);
    ++completed_;
    done_.notify_all();
    if (!want_device_) return;
    if (devices_.size() + runtime_.size() >= max_records_) {
      ++dropped_;
      return;
    }
    const size_t d = std::min<size_t>(a.device, offset_ps_.size() - 1);
    const int64_t start_ps = static_cast<int64_t>(a.start_ps);
    const int64_t submit_ps = (a.submit_ns - origin_ns_) * 1000;
    std::optional<int64_t>& offset = offset_ps_[d];
    offset = std::max(offset.value_or(std::numeric_limits<int64_t>::min()), submit_ps - start_ps);
    // Both ends through the same mapping, so that activities on a row never overlap.
    const int64_t mapped_ps = start_ps + *offset;
    const int64_t mapped_end_ps = mapped_ps + static_cast<int64_t>(a.end_ps - a.start_ps);
    try {
      DeviceRecord& r = devices_.emplace_back();
      r.activity = a;
      r.start_ns = origin_ns_ + mapped_ps / 1000;
      r.end_ns = origin_ns_ + mapped_end_ps / 1000;
    } catch (...) {
      ++dropped_;
    }
  }

  void on_runtime_call(const mtia::RuntimeCall& call) noexcept override {
    if (!want_runtime_) return;
    const int32_t thread = libkineto::systemThreadId();
    std::lock_guard lock(mu_);
    if (devices_.size() + runtime_.size() >= max_records_) {
      ++dropped_;
      return;
    }
    try {
      runtime_.push_back(RuntimeRecord{call, thread});
    } catch (...) {
      ++dropped_;
    }
  }

  // Waits (at most `limit`) until every packet submitted under this collector has completed;
  // false if some have not.
  bool wait_for_completions(std::chrono::milliseconds limit) {
    std::unique_lock lock(mu_);
    return done_.wait_for(lock, limit, [&] { return completed_ >= submitted_; });
  }

  size_t max_records() const { return max_records_; }

  struct Taken {
    std::vector<DeviceRecord> devices;
    std::vector<RuntimeRecord> runtime;
    uint64_t dropped = 0;
  };
  Taken take() {
    std::lock_guard lock(mu_);
    Taken t{std::move(devices_), std::move(runtime_), dropped_};
    devices_.clear();
    runtime_.clear();
    return t;
  }

  ProfilerCounts counts() {
    std::lock_guard lock(mu_);
    return {false, devices_.size(), runtime_.size(), dropped_};
  }

 private:
  const bool want_device_;
  const bool want_runtime_;
  const size_t max_records_;
  const int64_t origin_ns_ = mtia::wall_clock_ns();
  std::mutex mu_;
  std::condition_variable done_;
  uint64_t submitted_ = 0;
  uint64_t completed_ = 0;
  uint64_t dropped_ = 0;
  std::array<std::optional<int64_t>, kMaxDevices> offset_ps_{};
  std::vector<DeviceRecord> devices_;
  std::vector<RuntimeRecord> runtime_;
};

// The session that records now (at most one), and the latest one's counts. Never destroyed:
// Kineto may end a session from its own static destructors at exit.
struct Global {
  std::mutex mu;
  std::shared_ptr<Collector> active;
  ProfilerCounts last;
};
Global& global() {
  static Global* g = new Global;
  return *g;
}

// The calling thread's operator correlation ids, innermost last (trivially destructible, so
// that a session ending at exit never meets a destroyed one). Deeper nesting keeps the
// innermost id that fits.
constexpr int kMaxNesting = 256;
thread_local std::array<uint64_t, kMaxNesting> t_correlation{};
thread_local int t_depth = 0;

// Sets `observer` on every device that is open now (null: removes it). Devices of a runtime
// that is gone (shutdown, interpreter exit) are skipped.
void observe_open_devices(const std::shared_ptr<Collector>& observer) {
  if (!Runtime::is_initialized() || Runtime::is_shut_down()) return;
  try {
    Runtime& runtime = Runtime::get();
    for (c10::DeviceIndex i = 0; i < kMaxDevices; ++i) {
      if (DeviceContext* c = runtime.opened(i)) mtia::set_activity_observer(c->device(), observer);
    }
  } catch (const std::exception&) {
    // The runtime shut down meanwhile: its devices observe nothing any more.
  }
}

std::string kind_category(mtia::ActivityKind kind) {
  switch (kind) {
    case mtia::ActivityKind::kLaunch:
      return "kernel";
    case mtia::ActivityKind::kCopy:
      return "memcpy";
    case mtia::ActivityKind::kFill:
      return "memset";
    case mtia::ActivityKind::kGraph:
      return "graph";
    case mtia::ActivityKind::kLink:
      return "link";
  }
  return "unknown";
}

const std::string& already_recording_message() {
  static const std::string message =
      "torch_mtia_emu: another profile of the MTIA devices is already recording; this one "
      "records no device activity. Stop the first profile before starting another.";
  return message;
}

const std::string& incomplete_message() {
  static const std::string message =
      "torch_mtia_emu: device work submitted during the profile had not completed 10 s after it "
      "stopped; it is missing from the trace. Synchronize every device "
      "(torch.mtia.synchronize(d)) before the profile ends.";
  return message;
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  Session(bool device, bool runtime) : device_(device), runtime_(runtime) {}

  ~Session() override { stop(); }

  void start() override {
    Global& g = global();
    std::lock_guard lock(g.mu);
    if (g.active != nullptr) {
      status_ = libkineto::TraceStatus::ERROR;
      errors_.push_back(already_recording_message());
      return;
    }
    collector_ = std::make_shared<Collector>(device_, runtime_, max_records());
    g.active = collector_;
    g.last = {};
    g.last.recording = true;
    observe_open_devices(collector_);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    Global& g = global();
    std::lock_guard lock(g.mu);
    if (collector_ == nullptr || g.active != collector_) return;
    observe_open_devices(nullptr);
    g.active = nullptr;
    g.last.recording = false;
    t_depth = 0;
    mtia::set_activity_tag(0);
    if (status_ == libkineto::TraceStatus::RECORDING) status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(
        logger, [](int32_t) { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t start_time, int64_t end_time) override {
    if (collector_ == nullptr) return;
    // The profiler synchronizes the current device before it stops; work on other devices may
    // still be running.
    if (!collector_->wait_for_completions(std::chrono::seconds(10))) {
      errors_.push_back(incomplete_message());
      log::warn(incomplete_message());
    }
    Collector::Taken taken = collector_->take();
    {
      Global& g = global();
      std::lock_guard lock(g.mu);
      g.last.device_activities = taken.devices.size();
      g.last.runtime_calls = taken.runtime.size();
      g.last.dropped = taken.dropped;
    }
    if (taken.dropped > 0) {
      const std::string message =
          "torch_mtia_emu: the profile kept at most " + std::to_string(collector_->max_records()) +
          " records and dropped " + std::to_string(taken.dropped) + "; profile fewer steps.";
      errors_.push_back(message);
      log::warn(message);
    }
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_time, end_time, "MTIA");
    buffer_->gpuOpCount = -1;
    const int32_t pid = static_cast<int32_t>(::getpid());

    std::set<uint64_t> submitting;  // calls that queued device work: their flows start
    for (const DeviceRecord& r : taken.devices) submitting.insert(r.activity.call);
    for (const RuntimeRecord& r : taken.runtime) {
      buffer_->emplace_activity(buffer_->span, ActivityType::MTIA_RUNTIME,
                                std::string("mtia::") + r.call.name);
      auto& act = *buffer_->activities.back();
      act.startTime = r.call.start_ns;
      act.endTime = std::max(r.call.start_ns, r.call.end_ns);
      act.id = correlation_of(r.call.id);
      act.device = pid;
      act.resource = r.thread;
      act.threadId = r.thread;
      act.linked = r.call.tag != 0 ? linked(static_cast<int32_t>(r.call.tag)) : nullptr;
      if (submitting.contains(r.call.id)) {
        act.flow.id = static_cast<uint32_t>(act.id);
        act.flow.type = libkineto::kLinkAsyncCpuGpu;
        act.flow.start = 1;
      }
      act.addMetadataQuoted("correlation", std::to_string(act.id));
      act.addMetadataQuoted("device", std::to_string(r.call.device));
      if (!r.call.label.empty()) act.addMetadataQuoted("what", r.call.label);
      if (r.call.threw) act.addMetadataQuoted("threw", "true");
      logger.handleActivity(act);
    }
    std::map<std::pair<uint32_t, uint32_t>, uint32_t> rows;  // (device, stream) -> queue
    for (const DeviceRecord& r : taken.devices) {
      const mtia::DeviceActivity& a = r.activity;
      buffer_->emplace_activity(buffer_->span, ActivityType::MTIA_CCP_EVENTS, a.name);
      auto& act = *buffer_->activities.back();
      act.startTime = r.start_ns;
      act.endTime = r.end_ns;
      act.id = correlation_of(a.call);
      act.device = static_cast<int32_t>(a.device);
      act.resource = static_cast<int32_t>(a.stream);
      act.threadId = static_cast<int32_t>(a.stream);
      act.linked = a.tag != 0 ? linked(static_cast<int32_t>(a.tag)) : nullptr;
      if (a.call != 0) {
        act.flow.id = static_cast<uint32_t>(act.id);
        act.flow.type = libkineto::kLinkAsyncCpuGpu;
        act.flow.start = 0;
      }
      act.addMetadataQuoted("kind", kind_category(a.kind));
      if (a.call != 0) act.addMetadataQuoted("correlation", std::to_string(act.id));
      act.addMetadataQuoted("device", std::to_string(a.device));
      act.addMetadataQuoted("stream", std::to_string(a.stream));
      act.addMetadataQuoted("queue", std::to_string(a.queue));
      act.addMetadataQuoted("seq", std::to_string(a.seq));
      act.addMetadataQuoted("sim_start_ps", std::to_string(a.start_ps));
      act.addMetadataQuoted("sim_end_ps", std::to_string(a.end_ps));
      if (a.bytes != 0) act.addMetadataQuoted("bytes", std::to_string(a.bytes));
      if (!a.ok) act.addMetadataQuoted("failed", "true");
      rows.emplace(std::make_pair(a.device, a.stream), a.queue);
      logger.handleActivity(act);
    }
    std::set<uint32_t> devices;
    for (const auto& [key, queue] : rows) {
      devices.insert(key.first);
      resources_.push_back(libkineto::ResourceInfo{
          static_cast<int64_t>(key.second), static_cast<int64_t>(key.second),
          static_cast<int64_t>(key.first),
          "stream " + std::to_string(key.second) + " (queue " + std::to_string(queue) + ")"});
    }
    for (uint32_t d : devices) {
      // The first device's name is getDeviceInfo()'s; the others' are logged here.
      if (d == *devices.begin()) continue;
      logger.handleDeviceInfo(device_info(d), start_time);
    }
    if (!devices.empty()) first_device_ = *devices.begin();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(device_info(first_device_));
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return resources_; }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override {
    if (t_depth < kMaxNesting) t_correlation[size_t(t_depth)] = id;
    ++t_depth;
    mtia::set_activity_tag(t_correlation[size_t(std::min(t_depth, kMaxNesting) - 1)]);
  }

  void popCorrelationId() override {
    if (t_depth > 0) --t_depth;
    mtia::set_activity_tag(
        t_depth == 0 ? 0 : t_correlation[size_t(std::min(t_depth, kMaxNesting) - 1)]);
  }

 private:
  static libkineto::DeviceInfo device_info(uint32_t d) {
    return libkineto::DeviceInfo{static_cast<int64_t>(d), static_cast<int64_t>(d) + (1 << 24),
                                 "mtia:" + std::to_string(d) + " (emulated, simulated time)",
                                 "MTIA " + std::to_string(d)};
  }

  const bool device_;
  const bool runtime_;
  std::shared_ptr<Collector> collector_;
  std::vector<std::string> errors_;
  std::vector<libkineto::ResourceInfo> resources_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  uint32_t first_device_ = 0;
};

class Profiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return types_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& types, const libkineto::Config& /*config*/) override {
    const bool device = types.contains(ActivityType::MTIA_CCP_EVENTS);
    const bool runtime = types.contains(ActivityType::MTIA_RUNTIME);
    if (!device && !runtime) return nullptr;
    return std::make_unique<Session>(device, runtime);
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  const std::string name_ = "torch_mtia_emu";
  const std::set<ActivityType> types_{ActivityType::MTIA_RUNTIME, ActivityType::MTIA_CCP_EVENTS};
};

}  // namespace

void register_profiler() {
  static std::once_flag once;
  std::call_once(once, [] {
    libkineto::api().registerProfilerFactory([]() -> std::unique_ptr<libkineto::IActivityProfiler> {
      return std::make_unique<Profiler>();
    });
  });
}

void profiler_device_opened(mtia::Device& device) {
  Global& g = global();
  std::lock_guard lock(g.mu);
  if (g.active != nullptr) mtia::set_activity_observer(device, g.active);
}

std::string synchronize_open_devices() {
  if (!Runtime::is_initialized() || Runtime::is_shut_down()) return {};
  std::string first;
  try {
    Runtime& runtime = Runtime::get();
    for (c10::DeviceIndex i = 0; i < kMaxDevices; ++i) {
      DeviceContext* c = runtime.opened(i);
      if (c == nullptr) continue;
      try {
        c->device().synchronize();
      } catch (const std::exception& e) {
        if (first.empty()) {
          first = "torch_mtia_emu: the profile ended, but synchronizing mtia:" + std::to_string(i) +
                  " failed: " + e.what();
        }
      }
    }
  } catch (const std::exception&) {
    // The runtime shut down meanwhile: nothing is left to wait for.
  }
  return first;
}

ProfilerCounts profiler_counts() {
  Global& g = global();
  std::lock_guard lock(g.mu);
  ProfilerCounts c = g.last;
  if (g.active != nullptr) {
    const ProfilerCounts now = g.active->counts();
    c.device_activities = now.device_activities;
    c.runtime_calls = now.runtime_calls;
    c.dropped = now.dropped;
  }
  return c;
}

}  // namespace mtia::torch_backend
