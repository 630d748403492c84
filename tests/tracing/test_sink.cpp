// trace::Sink and the trace.json writer on their own: the bound and its drop reports, nothing
// recorded with the level off, and the writer's JSON (escaping, streaming equals text).
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mtia/trace/sink.h"
#include "mtia/trace/trace_writer.h"

using namespace mtia::trace;
using Json = nlohmann::json;

namespace {

DeviceInfo device(std::string name = "dev") {
  DeviceInfo d;
  d.process_name = std::move(name);
  d.config_json = R"({"name": {"value": "test"}})";
  d.num_queues = 2;
  d.dma_engines = 1;
  d.pes = 4;
  return d;
}

TraceOptions options(TraceLevel level, uint64_t max_events = 1'000'000) {
  TraceOptions o;
  o.level = level;
  o.max_events = max_events;
  return o;
}

Json written(const Sink& sink, uint64_t now_ps = 0) {
  return Json::parse(
      sink.read([&](const Recording& rec) { return trace_json(rec, sink.level(), now_ps); }));
}

}  // namespace

TEST_CASE("the sink drops past its limit, unit operations first, and reports each kind once",
          "[trace]") {
  std::vector<std::string> reports;
  Sink sink(device(), options(TraceLevel::kUnits, 8),
            [&](const std::string& m) { reports.push_back(m); });
  // Unit operations stop at 3/4 of the limit: 6 kept.
  for (int i = 0; i < 10; ++i) sink.pe_unit(1, Unit::kRe, i * 10, i * 10 + 5, 3, DpeClass::kFp32);
  CHECK(sink.events() == 6);
  CHECK(sink.dropped_detail() == 4);
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].find("unit operations are dropped") != std::string::npos);
  CHECK(reports[0].find("limit of 8") != std::string::npos);
  // Kernel-level events keep the last quarter, then they are dropped too.
  for (int i = 0; i < 4; ++i) sink.cp_step(i, 1);
  CHECK(sink.events() == 8);
  CHECK(sink.dropped() == 4 + 2);
  REQUIRE(reports.size() == 2);
  CHECK(reports[1].find("incomplete") != std::string::npos);
  sink.dma(0, DmaEvent{});
  CHECK(reports.size() == 2);  // once per kind
  // A host call and its packets need room for all of them.
  HostCall call;
  call.thread = 1;
  call.packets.resize(2);
  sink.host_call(call);
  CHECK(sink.dropped() == 4 + 3 + 1);
  sink.read([](const Recording& rec) {
    CHECK(rec.pe_units.size() == 6);
    CHECK(rec.cp_steps.size() == 2);
    CHECK(rec.dropped_host_calls == 1);
    CHECK_FALSE(rec.complete());
    CHECK(rec.dropped_all() == 8);
    return 0;
  });
  // The statistics of a launch are kept whatever the bound dropped.
  Sink small(device(), options(TraceLevel::kUnits, 4));
  LaunchInfo info;
  info.grid_rows = info.grid_cols = 1;
  small.launch_begin(info);
  for (int i = 0; i < 10; ++i) small.pe_unit(0, Unit::kSe, i * 10, i * 10 + 5, 2, DpeClass::kFp32);
  small.launch_end(100, 0);
  small.read([](const Recording& rec) {
    REQUIRE(rec.launches.size() == 1);
    CHECK(rec.launches[0].stats.ops[static_cast<size_t>(Unit::kSe)] == 10);
    CHECK(rec.launches[0].stats.busy_ps[static_cast<size_t>(Unit::kSe)] == 50);
    CHECK(rec.pe_units.size() == 2);  // 3/4 of 4 events, one of them the launch
    return 0;
  });
}

TEST_CASE(
    "a sanitizer finding is kept past the limit and written as an instant event on its "
    "PE's track",
    "[trace]") {
  Sink sink(device(), options(TraceLevel::kKernels, 4));  // the smallest limit
  for (int i = 0; i < 5; ++i) sink.cp_step(i, 1);         // the last one is dropped
  const std::string report = "PE 3 (row 1, col 1): memcheck: reads \"past\" the end";
  sink.sanitizer_finding(3, 2'500'000, "memcheck", report);
  sink.read([](const Recording& rec) {
    REQUIRE(rec.findings.size() == 1);
    CHECK(rec.cp_steps.size() == 4);
    CHECK(rec.device_events() == 5);
    return 0;
  });
  const Json trace = written(sink);
  std::vector<Json> instants;
  std::string pe3_track_name;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "i") instants.push_back(e);
  }
  REQUIRE(instants.size() == 1);
  const Json& f = instants[0];
  CHECK(f["s"] == "t");
  CHECK(f["cat"] == "sanitizer");
  CHECK(f["name"] == "sanitizer: memcheck");
  CHECK(f["ts"].get<double>() == 2.5);  // microseconds
  CHECK(f["args"]["pe"] == 3);
  CHECK(f["args"]["report"] == report);
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == f["tid"] &&
        e["pid"] == f["pid"]) {
      pe3_track_name = e["args"]["name"].get<std::string>();
    }
  }
  CHECK(pe3_track_name == "pe 3");
  // With the level off nothing is kept.
  Sink off(device(), options(TraceLevel::kOff));
  off.sanitizer_finding(0, 0, "racecheck", "r");
  CHECK(off.events() == 0);
}

TEST_CASE("with the level off the sink records and counts nothing", "[trace]") {
  Sink sink(device(), options(TraceLevel::kOff, 4));
  LaunchInfo info;
  info.grid_rows = info.grid_cols = 1;
  sink.launch_begin(info);
  sink.pe_unit(0, Unit::kDpe, 0, 10, 100, DpeClass::kFp32);
  sink.pe_kernel(0, 0, 10);
  sink.launch_end(10, 0);
  sink.reservation({Memory::kDram, 0, 10, 64}, true);
  for (int i = 0; i < 10; ++i) sink.cp_step(i, 1);
  sink.host_call(HostCall{});
  CHECK(sink.events() == 0);
  CHECK(sink.dropped() == 0);
  sink.read([](const Recording& rec) {
    CHECK(rec.device_events() == 0);
    CHECK(rec.host_events() == 0);
    CHECK(rec.bandwidth[static_cast<size_t>(Memory::kDram)].total_bytes() == 0);
    return 0;
  });
  CHECK(written(sink)["otherData"]["trace_level"] == "off");
}

TEST_CASE("the writer escapes what it is given and streams the same text it returns", "[trace]") {
  Sink sink(device("dev \"0\"\n\xff"), options(TraceLevel::kKernels));
  HostCall call;
  call.thread = 1;
  call.name = "launch";
  call.detail = "tab\there, quote \" and backslash \\";
  call.packets.push_back({0, 7, 0, "k\xc3\xa9rnel"});  // UTF-8 passes through
  sink.host_call(call);
  sink.packet({0, 10, 20, 7, 0, static_cast<uint8_t>(6), 0, 0});
  const Json doc = written(sink, 20);
  std::string process;
  for (const Json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == 2) process = e["args"]["name"];
  }
  CHECK(process == "dev \"0\"\n\xef\xbf\xbd");  // a byte that is not UTF-8 becomes U+FFFD
  bool found = false;
  for (const Json& e : doc["traceEvents"]) {
    if (e.value("cat", "") == "host") {
      CHECK(e["args"]["detail"] == call.detail);
      found = true;
    }
    if (e.value("cat", "") == "submit") CHECK(e["args"]["label"] == "k\xc3\xa9rnel");
  }
  CHECK(found);
  CHECK(doc["otherData"]["simulated_time_ps"] == 20);
  CHECK(doc["otherData"]["config"]["name"]["value"] == "test");
  // Streamed in pieces or returned whole: the same text.
  std::ostringstream streamed;
  sink.read([&](const Recording& rec) {
    write_trace_json(rec, sink.level(), 20, streamed);
    return 0;
  });
  CHECK(streamed.str() ==
        sink.read([&](const Recording& rec) { return trace_json(rec, sink.level(), 20); }));
}

TEST_CASE("level names", "[trace]") {
  for (TraceLevel l : {TraceLevel::kOff, TraceLevel::kKernels, TraceLevel::kUnits}) {
    CHECK(parse_trace_level(trace_level_name(l)) == l);
  }
  CHECK_FALSE(parse_trace_level("Units").has_value());
  CHECK(TraceOptions{}.max_events == kDefaultTraceMaxEvents);
  CHECK(std::string(unit_name(Unit::kMlu)) == "mlu");
  CHECK(std::string(memory_name(Memory::kPcieD2H)) == "pcie_d2h");
}
