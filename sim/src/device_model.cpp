#include "device_model.h"

namespace mtia::sim::detail {

namespace {
std::vector<std::unique_ptr<DmaEngine>> make_engines(SimShared& shared) {
  std::vector<std::unique_ptr<DmaEngine>> engines;
  for (unsigned i = 0; i < shared.config.dma_engines; ++i) {
    engines.push_back(std::make_unique<DmaEngine>(("dma" + std::to_string(i)).c_str(), i, shared));
  }
  return engines;
}
}  // namespace

std::vector<DmaEngine*> DeviceModel::raw(const std::vector<std::unique_ptr<DmaEngine>>& v) {
  std::vector<DmaEngine*> out;
  for (const auto& e : v) out.push_back(e.get());
  return out;
}

DeviceModel::DeviceModel(sc_core::sc_module_name name, SimShared& shared)
    : sc_core::sc_module(name),
      shared_(shared),
      engines_(make_engines(shared)),
      grid_("pe_grid", shared),
      cp_("command_processor", shared, raw(engines_), grid_, channel_),
      regs_("bar0", cp_),
      bridge_("host_bridge", shared, channel_, regs_) {
  for (auto& e : engines_) e->done_port.bind(cp_);
  grid_.launch_done_port.bind(cp_);
  bridge_.socket.bind(regs_.socket);
}

DeviceModel::~DeviceModel() = default;

std::string DeviceModel::stats_json() const {
  Json doc = Json::object();
  const uint64_t now = sc_core::sc_time_stamp().value();
  Json dev = Json::object();
  add_stat(dev, "simulated_time_ps", now, "ps", "simulated time reached");
  doc["device"] = dev;
  doc["command_processor"] = cp_.stats_json();
  Json bridge = bridge_.stats_json();
  const Json regs = regs_.stats_json();
  for (auto it = regs.begin(); it != regs.end(); ++it) bridge["bar0_" + it.key()] = it.value();
  doc["bridge"] = bridge;
  for (size_t i = 0; i < engines_.size(); ++i) {
    doc["dma" + std::to_string(i)] = engines_[i]->stats_json();
  }
  doc["pe_grid"] = grid_.stats_json();
  for (int i = 0; i < kNumResources; ++i) {
    const auto r = static_cast<Resource>(i);
    const ResourceStats& s = shared_.memory->stats(r);
    Json m = Json::object();
    add_stat(m, "jobs", s.jobs, "jobs", "DMA jobs that used this memory or link");
    add_stat(m, "bytes", s.bytes, "bytes",
             "payload bytes moved through it (a copy within one memory counts twice)");
    add_stat(m, "effective_bytes", s.effective_bytes, "bytes",
             "bytes charged, burst waste included");
    add_stat(m, "busy_ps", s.busy_ps, "ps", "time reserved on its bandwidth timeline");
    const double achieved = s.busy_ps == 0 ? 0.0 : double(s.bytes) * 1000.0 / double(s.busy_ps);
    add_stat(m, "achieved_GBps", achieved, "GB/s", "payload bytes per busy time (10^9 B/s)");
    const double util = now == 0 ? 0.0 : double(s.busy_ps) / double(now);
    add_stat(m, "utilization", util, "fraction", "busy time over simulated time");
    add_stat(m, "configured_GBps", double(shared_.memory->params(r).bandwidth_MBps) / 1000.0,
             "GB/s", "bandwidth from the configuration");
    doc[resource_name(r)] = m;
  }
  // Inter-chip links: each direction of each link that carried something, as "link0_send".
  for (uint32_t l = 0; l < shared_.memory->link_count(); ++l) {
    for (const auto dir : {isa::LinkDirection::kSend, isa::LinkDirection::kReceive}) {
      const LinkStats& s = shared_.memory->link_stats(l, dir);
      if (s.transfers == 0) continue;
      Json m = Json::object();
      add_stat(m, "transfers", s.transfers, "transfers", "link transfers in this direction");
      add_stat(m, "bytes", s.bytes, "bytes", "payload bytes carried");
      add_stat(m, "busy_ps", s.busy_ps, "ps", "time reserved on the direction's timeline");
      const bool send = dir == isa::LinkDirection::kSend;
      doc["link" + std::to_string(l) + (send ? "_send" : "_receive")] = m;
    }
  }
  Json trace = Json::object();
  add_stat(trace, "events", shared_.tracer->events(), "events", "trace events kept");
  add_stat(trace, "dropped_events", shared_.tracer->dropped(), "events",
           "trace events dropped after the buffer limit");
  doc["trace"] = trace;
  return doc.dump(2) + "\n";
}

}  // namespace mtia::sim::detail
