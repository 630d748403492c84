// The Chrome trace writer (sim/src/device_tracer.h): exact microsecond timestamps, track layout,
// flow arrows from host calls through packets to device work and completions, per-launch
// statistics, DMA lanes, bandwidth counters, trace levels and the event bound.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device_tracer.h"  // sim/src: the tracer is private to the sim layer
#include "mtia/isa/packets.h"

using mtia::sim::ChipConfig;
using mtia::sim::detail::Tracer;
using mtia::trace::HostCall;
using mtia::trace::TraceLevel;
using mtia::trace::TraceOptions;
using Json = nlohmann::json;

namespace {

ChipConfig small_config(uint32_t queues = 2, uint32_t engines = 1) {
  ChipConfig c;
  c.name = "test";
  c.num_queues = queues;
  c.dma_engines = engines;
  return c;
}

TraceOptions level(TraceLevel l, uint64_t max_events = 1'000'000) {
  TraceOptions o;
  o.level = l;
  o.max_events = max_events;
  return o;
}

struct Parsed {
  Json doc;
  std::map<std::pair<int, int>, std::string> names;  // (pid, tid) -> track name
  std::vector<Json> slices;
  std::vector<Json> counters;
  std::vector<Json> of(const std::string& cat) const {
    std::vector<Json> out;
    for (const Json& e : slices) {
      if (e.value("cat", "") == cat) out.push_back(e);
    }
    return out;
  }
  std::string track(const Json& e) const { return names.at({e["pid"], e["tid"]}); }
};

Parsed parse(const Tracer& t, uint64_t now = 0) {
  Parsed p;
  p.doc = Json::parse(t.json(now));
  for (const Json& e : p.doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      p.names[{e["pid"], e["tid"]}] = e["args"]["name"];
    }
    if (e["ph"] == "X") p.slices.push_back(e);
    if (e["ph"] == "C") p.counters.push_back(e);
  }
  return p;
}

double us(const Json& v) {
  return v.get<double>();
}

}  // namespace

TEST_CASE("trace events carry exact simulated microseconds and their tracks", "[trace]") {
  Tracer t("mtia-emu device 0 (\"quoted\")", small_config(), level(TraceLevel::kKernels));
  t.cp_step(1'234'567, 200'000);
  t.packet(1, 1'000'001, 34'888'128, 77, 3, 2, 0, 0);
  Tracer::DmaEvent d;
  d.start_ps = 999'999'999'999;  // ~1 s
  d.end_ps = 1'000'000'000'001;
  d.bytes = 4096;
  d.src = 0x7000'0000'0000;
  d.src_space = 1;  // host: its address changes run to run and is left out
  d.dst = 0x0100'0000'0040;
  d.effective_bytes = 8192;
  d.error = 9;
  t.dma(0, d);
  const Parsed p = parse(t);
  for (const Json& e : p.doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      CHECK(e["args"]["name"] == "mtia-emu device 0 (\"quoted\")");
      CHECK(e["pid"] == 2);  // no host calls: no host process
    }
  }
  // command processor, queue 0, queue 1, dma 0
  CHECK(p.names.size() == 4);
  REQUIRE(p.slices.size() == 3);
  const Json cp = p.of("cp").at(0);
  CHECK(p.track(cp) == "command processor");
  CHECK(us(cp["ts"]) == Approx(1.234567).margin(1e-12));
  CHECK(us(cp["dur"]) == Approx(0.2).margin(1e-12));
  const Json pk = p.of("packet").at(0);
  CHECK(p.track(pk) == "queue 1");
  CHECK(pk["name"] == "DMA copy");
  CHECK(pk["args"]["seq"] == 77);
  CHECK(pk["args"]["status"] == "ok");
  CHECK(us(pk["dur"]) == Approx(33.888127).margin(1e-12));
  CHECK_FALSE(pk.contains("bind_id"));  // no host call submitted it
  const Json dma = p.of("dma").at(0);
  CHECK(p.track(dma) == "dma 0");
  CHECK_FALSE(dma["args"].contains("src"));
  CHECK(dma["args"]["src_memory"] == "host");
  CHECK(dma["args"]["dst"] == "0x10000000040");
  CHECK(dma["args"]["dst_memory"] == "sram");
  CHECK(dma["args"]["effective_bytes"] == 8192);
  CHECK(dma["args"]["error"] == "device address fault");
  // 999'999'999'999 ps is printed digit-exact.
  CHECK(t.json().find("\"ts\":999999.999999") != std::string::npos);
  CHECK(p.doc["otherData"]["format"] == "mtia-emu trace");
  CHECK(p.doc["otherData"]["trace_level"] == "kernels");
  CHECK(p.doc["otherData"]["config"]["num_queues"]["value"] == 2);
}

TEST_CASE("a flow leads from the host call through the packet and its work to the completion",
          "[trace]") {
  Tracer t("dev", small_config(), level(TraceLevel::kKernels));
  // Host thread 1: a copy (queue 1, seq 5) and a launch (queue 1, seq 6), then a copy whose
  // packet never shows on the device (still running when the trace is written).
  HostCall copy;
  copy.thread = 1;
  copy.order = 0;
  copy.name = "copy_async";
  copy.wall_us = 12.5;
  copy.packets.push_back({1, 5, 0, "copy host to device"});
  t.host_call(copy);
  HostCall launch;
  launch.thread = 1;
  launch.order = 1;
  launch.name = "launch";
  launch.packets.push_back({1, 6, 0, "matmul"});
  launch.packets.push_back({1, 9, 0, "lost"});
  t.host_call(launch);

  t.packet(1, 1000, 5000, 5, 0, static_cast<uint8_t>(mtia::isa::Opcode::kDmaCopy), 0, 0);
  Tracer::DmaEvent d;
  d.start_ps = 1000;
  d.end_ps = 4500;
  d.bytes = 64;
  d.queue = 1;
  d.seq = 5;
  t.dma(0, d);
  Tracer::LaunchInfo info;
  info.queue = 1;
  info.seq = 6;
  info.grid_rows = 1;
  info.grid_cols = 2;
  info.start_ps = 5000;
  t.launch_begin(info);
  t.pe_kernel(0, 5000, 7000);
  t.launch_end(7000, 0);
  t.packet(1, 5000, 7000, 6, 1, static_cast<uint8_t>(mtia::isa::Opcode::kLaunch), 0, 0);
  // A packet no host call submitted (e.g. a fence repair): no flow.
  t.packet(0, 100, 200, 1, 0, static_cast<uint8_t>(mtia::isa::Opcode::kSignal), 0, 0);

  const Parsed p = parse(t);
  std::map<uint64_t, std::vector<Json>> flows;
  for (const Json& e : p.slices) {
    if (e.contains("bind_id")) flows[e["bind_id"].get<uint64_t>()].push_back(e);
  }
  REQUIRE(flows.size() == 2);  // seq 5 and 6; seq 9 never reached the device
  for (const auto& [id, parts] : flows) {
    INFO("flow " << id);
    // In file order: submit (out), packet (in+out), work (in+out), completion (in).
    REQUIRE(parts.size() == 4);
    CHECK(parts[0]["cat"] == "submit");
    CHECK(parts[0].value("flow_out", false));
    CHECK_FALSE(parts[0].value("flow_in", false));
    CHECK(parts[1]["cat"] == "packet");
    CHECK(parts[2]["cat"] == (parts[1]["args"]["seq"] == 5 ? "dma" : "launch"));
    for (int i : {1, 2})
      CHECK((parts[i].value("flow_in", false) && parts[i].value("flow_out", false)));
    CHECK(parts[3]["cat"] == "completion");
    CHECK(p.track(parts[3]) == "completions (driver interrupt handler)");
    CHECK(parts[3].value("flow_in", false));
    CHECK_FALSE(parts[3].value("flow_out", false));
    for (size_t i = 1; i < parts.size(); ++i) CHECK(us(parts[i]["ts"]) >= us(parts[i - 1]["ts"]));
  }
  // The launch is named by the host call's label, on the packet and on the PE grid's track.
  const Json l = p.of("launch").at(0);
  CHECK(l["name"] == "matmul");
  CHECK(p.track(l) == "pe grid (launches)");
  CHECK(us(l["dur"]) == Approx(0.002).margin(1e-12));
  bool launch_packet = false;
  for (const Json& e : p.of("packet")) launch_packet |= e["name"] == "launch matmul";
  CHECK(launch_packet);
  // Host calls on the thread's track, with their wall-clock fields and submit children.
  const auto calls = p.of("host");
  REQUIRE(calls.size() == 2);
  CHECK(p.track(calls[0]) == "host thread 1");
  CHECK(calls[0]["name"] == "copy_async");
  CHECK(calls[0]["args"]["wall_us"] == 12.5);
  CHECK(p.of("submit").size() == 3);
  CHECK(p.of("completion").size() == 2);
  CHECK(p.doc["otherData"]["events"] == 6 + 5);  // device events + host calls and packets
}

TEST_CASE("a launch's statistics: FLOPs, bytes, unit busy time and DMA lanes", "[trace]") {
  Tracer t("dev", small_config(), level(TraceLevel::kUnits));
  Tracer::LaunchInfo info;
  info.image_addr = 0x4000;
  info.entry_offset = 0x20;
  info.grid_rows = 1;
  info.grid_cols = 2;
  info.start_ps = 0;
  t.launch_begin(info);
  using U = Tracer::Unit;
  // PE 3: two DPE ops (fp32 and fp16 inputs), one SE op, three DMAs of which two overlap.
  t.pe_unit(3, U::kDpe, 100, 300, 1000, Tracer::DpeClass::kFp32);
  t.pe_unit(3, U::kDpe, 300, 400, 500, Tracer::DpeClass::k16Bit);
  t.pe_unit(3, U::kSe, 400, 450, 64);
  t.pe_unit(3, U::kDma, 0, 200, 4096);
  t.pe_unit(3, U::kDma, 100, 250, 2048);  // overlaps the first: second lane
  t.pe_unit(3, U::kDma, 220, 260, 1024);  // lane 0 is free again at 200
  t.pe_unit(4, U::kRe, 10, 20, 7);
  t.pe_kernel(3, 0, 500);
  t.pe_kernel(4, 0, 400);
  t.launch_end(600, 0);
  const Parsed p = parse(t);
  const Json l = p.of("launch").at(0);
  CHECK(l["name"] == "kernel@0x4000+0x20");  // no host call named it
  const Json& a = l["args"];
  CHECK(a["pes"] == 2);
  CHECK(a["dur_ps"] == 600);
  CHECK(a["dpe_macs_fp32"] == 1000);
  CHECK(a["dpe_macs_16bit"] == 500);
  CHECK(a["dpe_macs_int8"] == 0);
  CHECK(a["se_elements"] == 64);
  CHECK(a["re_elements"] == 7);
  CHECK(a["dma_bytes"] == 4096 + 2048 + 1024);
  CHECK(a["flops"] == 2 * 1500 + 64);
  CHECK(a["busy_ps"]["dpe"] == 300);
  CHECK(a["busy_ps"]["se"] == 50);
  CHECK(a["busy_ps"]["re"] == 10);
  CHECK(a["busy_ps"]["dma"] == 260);  // union of [0,200), [100,250), [220,260)
  CHECK(a["core_ps"] == 900);
  CHECK(a["ops"]["dma"] == 3);
  // Unit tracks per PE; the DMAs on lanes where they do not overlap.
  std::map<std::string, std::vector<std::pair<double, double>>> tracks;
  for (const Json& e : p.of("unit")) {
    tracks[p.track(e)].push_back({us(e["ts"]), us(e["ts"]) + us(e["dur"])});
  }
  CHECK(tracks["pe 3 dpe"].size() == 2);
  CHECK(tracks["pe 3 se"].size() == 1);
  CHECK(tracks["pe 4 re"].size() == 1);
  CHECK(tracks["pe 3 dma 0"].size() == 2);
  CHECK(tracks["pe 3 dma 1"].size() == 1);
  CHECK(tracks["pe 3 dma 0"][1].first >= tracks["pe 3 dma 0"][0].second);
  for (const Json& e : p.of("kernel")) CHECK(p.track(e).rfind("pe ", 0) == 0);
}

TEST_CASE(
    "trace levels: kernels keeps launch statistics without unit slices, off records "
    "nothing",
    "[trace]") {
  for (TraceLevel lv : {TraceLevel::kKernels, TraceLevel::kOff}) {
    Tracer t("dev", small_config(), level(lv));
    Tracer::LaunchInfo info;
    info.grid_rows = info.grid_cols = 1;
    t.launch_begin(info);
    t.pe_unit(0, Tracer::Unit::kDpe, 0, 100, 256);
    t.pe_kernel(0, 0, 100);
    t.launch_end(100, 0);
    t.cp_step(0, 10);
    HostCall c;
    c.thread = 1;
    c.name = "malloc";
    t.host_call(c);
    const Parsed p = parse(t);
    CHECK(p.of("unit").empty());
    if (lv == TraceLevel::kKernels) {
      REQUIRE(p.of("launch").size() == 1);
      CHECK(p.of("launch")[0]["args"]["flops"] == 512);
      CHECK(p.of("kernel").size() == 1);
      CHECK(p.of("host").size() == 1);
    } else {
      CHECK(p.slices.empty());
      CHECK(t.events() == 0);
    }
  }
  // Switching off stops recording; switching on resumes it.
  Tracer t("dev", small_config(), level(TraceLevel::kUnits));
  t.cp_step(0, 1);
  t.set_level(TraceLevel::kOff);
  t.cp_step(10, 1);
  t.set_level(TraceLevel::kKernels);
  t.cp_step(20, 1);
  CHECK(parse(t).of("cp").size() == 2);
}

TEST_CASE("bandwidth counters spread each reservation's payload over time bins", "[trace]") {
  Tracer t("dev", small_config(), level(TraceLevel::kKernels));
  mtia::sim::DmaPlan plan;
  plan.payload_bytes = 1'000'000;
  plan.src.memory = mtia::sim::MemoryKind::kDram;
  plan.dst.memory = mtia::sim::MemoryKind::kDram;  // a copy within DRAM: read and written
  const int dram = static_cast<int>(mtia::sim::Resource::kDram);
  plan.effective_bytes[dram] = 2'000'000;
  plan.resource_start_ps[dram] = 50'000;
  plan.busy_ps[dram] = 200'000;  // [50 ns, 250 ns): bins of 100 ns get 1/4, 1/2, 1/4
  t.reservations(plan);
  mtia::sim::DmaPlan h2d;  // host -> local store: PCIe only
  h2d.payload_bytes = 300;
  h2d.src.host = true;
  h2d.dst.memory = mtia::sim::MemoryKind::kLocalStore;
  const int pcie = static_cast<int>(mtia::sim::Resource::kPcieH2D);
  h2d.effective_bytes[pcie] = 320;
  h2d.resource_start_ps[pcie] = 0;
  h2d.busy_ps[pcie] = 0;  // timing off: everything lands in the first bin
  t.reservations(h2d);
  const Parsed p = parse(t);
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  for (const Json& c : p.counters) {
    if (c["cat"] == "bandwidth") series[c["name"]].push_back({us(c["ts"]), c["args"]["GB/s"]});
  }
  // 2e6 bytes: 5e5 in [0,100) ns, 1e6 in [100,200), 5e5 in [200,300): 5000, 10000, 5000 GB/s.
  const auto& d = series.at("dram bandwidth");
  REQUIRE(d.size() == 4);
  CHECK(d[0] == std::make_pair(0.0, 5000.0));
  CHECK(d[1] == std::make_pair(0.1, 10000.0));
  CHECK(d[2] == std::make_pair(0.2, 5000.0));
  CHECK(d[3] == std::make_pair(0.3, 0.0));
  CHECK(series.at("pcie_h2d bandwidth")[0].second == Approx(3.0));  // 300 B in 100 ns
  CHECK(series.count("sram bandwidth") == 0);
  const Json& mem = p.doc["otherData"]["memory"];
  CHECK(mem["dram"]["payload_bytes"] == 2'000'000);
  CHECK(mem["dram"]["reserved_ps"] == 200'000);
  CHECK(mem["pcie_h2d"]["payload_bytes"] == 300);

  // A PE's DMA counts into the running launch's DRAM and SRAM traffic; a host DMA job does not.
  Tracer::LaunchInfo info;
  info.grid_rows = info.grid_cols = 1;
  t.launch_begin(info);
  t.reservations(plan, /*pe_dma=*/true);
  t.reservations(plan);
  t.launch_end(1, 0);
  const Json l = parse(t).of("launch").at(0);
  CHECK(l["args"]["dram_bytes"] == 2'000'000);
  CHECK(l["args"]["sram_bytes"] == 0);

  // A long run: bins merge pairwise (their width doubles) so their number stays bounded.
  mtia::sim::DmaPlan late = plan;
  late.resource_start_ps[dram] = 4096ull * 100'000;
  t.reservations(late);
  const Parsed q = parse(t);
  CHECK(q.doc["otherData"]["bandwidth_bin_ps"]["dram"] == 200'000);
  CHECK(q.doc["otherData"]["memory"]["dram"]["payload_bytes"] == 4 * 2'000'000);
}

TEST_CASE("the trace keeps a bounded number of events and says how many it dropped", "[trace]") {
  Tracer t("dev", small_config(), level(TraceLevel::kUnits, 12));
  // Unit slices stop at 3/4 of the limit (9 events), so the rest is kept for packets.
  for (int i = 0; i < 20; ++i) t.pe_unit(0, Tracer::Unit::kSe, i * 10, i * 10 + 5, 1);
  CHECK(t.events() == 9);
  CHECK(t.dropped_detail() == 11);
  for (int i = 0; i < 5; ++i) t.cp_step(i * 1000, 500);
  CHECK(t.events() == 12);
  CHECK(t.dropped() == 11 + 2);
  HostCall c;
  c.thread = 1;
  t.host_call(c);  // no room either
  CHECK(t.dropped() == 14);
  const Parsed p = parse(t);
  const Json& meta = p.doc["otherData"];
  CHECK(meta["dropped_events"] == 14);
  CHECK(meta["dropped_detail_events"] == 11);
  CHECK(meta["dropped_host_calls"] == 1);
  CHECK(meta["complete"] == false);
  CHECK(meta["max_events"] == 12);
  bool noted = false;
  for (const Json& e : p.doc["traceEvents"]) {
    if (e["name"] == "process_labels") {
      noted = e["args"]["labels"].get<std::string>().find("14 events dropped") != std::string::npos;
    }
  }
  CHECK(noted);
  CHECK(TraceOptions{}.max_events == 1'000'000);
}

TEST_CASE("host calls at the same simulated time keep the order in which they started", "[trace]") {
  Tracer t("dev", small_config(), level(TraceLevel::kKernels));
  // Recorded when they return: the nested malloc first, then its caller, then a call that
  // waited 5 us. All start at 0.
  HostCall inner, outer, wait;
  inner.thread = outer.thread = wait.thread = 1;
  outer.name = "load_module";
  outer.order = 0;
  inner.name = "malloc";
  inner.order = 1;
  wait.name = "synchronize";
  wait.order = 2;
  wait.end_ps = 5'000'000;
  t.host_call(inner);
  t.host_call(outer);
  t.host_call(wait);
  const auto calls = parse(t).of("host");
  REQUIRE(calls.size() == 3);
  CHECK(calls[0]["name"] == "load_module");
  CHECK(calls[1]["name"] == "malloc");
  CHECK(calls[2]["name"] == "synchronize");
  CHECK(us(calls[2]["dur"]) == 5.0);
  // The same input gives the same text.
  CHECK(t.json(7) == t.json(7));
}

TEST_CASE("trace level names", "[trace]") {
  using mtia::trace::parse_trace_level;
  using mtia::trace::trace_level_name;
  for (TraceLevel l : {TraceLevel::kOff, TraceLevel::kKernels, TraceLevel::kUnits}) {
    CHECK(parse_trace_level(trace_level_name(l)) == l);
  }
  CHECK_FALSE(parse_trace_level("full").has_value());
  CHECK_FALSE(parse_trace_level("").has_value());
}
