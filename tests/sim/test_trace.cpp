// The Chrome trace writer: exact microsecond timestamps, track names, the event bound.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace.h"  // sim/src: the tracer is private to the sim layer

using mtia::sim::detail::Tracer;

TEST_CASE("trace events carry exact simulated microseconds and their tracks", "[trace]") {
  Tracer t("mtia-emu device 0 (\"quoted\")", 2, 1);
  t.cp_step(1'234'567, 200'000);
  t.packet(1, 1'000'001, 34'888'128, 77, 3, 2, 0, 0);
  Tracer::DmaEvent d;
  d.start_ps = 999'999'999'999;  // ~1 s
  d.end_ps = 1'000'000'000'001;
  d.bytes = 4096;
  d.src = 0x7000'0000'0000;
  d.src_space = 1;
  d.dst = 0x40;
  d.effective_bytes = 8192;
  d.error = 9;
  t.dma(0, d);
  const auto doc = nlohmann::json::parse(t.json());
  std::map<int, std::string> names;
  std::vector<nlohmann::json> slices;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "process_name") {
      CHECK(e["args"]["name"] == "mtia-emu device 0 (\"quoted\")");
    }
    if (e["ph"] == "X") slices.push_back(e);
  }
  CHECK(names.size() == 4);  // command processor, queue 0, queue 1, dma 0
  REQUIRE(slices.size() == 3);
  CHECK(names[slices[0]["tid"]] == "command processor");
  CHECK(slices[0]["ts"].get<double>() == Approx(1.234567).margin(1e-12));
  CHECK(slices[0]["dur"].get<double>() == Approx(0.2).margin(1e-12));
  CHECK(names[slices[1]["tid"]] == "queue 1");
  CHECK(slices[1]["name"] == "DMA copy");
  CHECK(slices[1]["args"]["seq"] == 77);
  CHECK(slices[1]["args"]["status"] == "ok");
  CHECK(slices[1]["dur"].get<double>() == Approx(33.888127).margin(1e-12));
  CHECK(names[slices[2]["tid"]] == "dma 0");
  CHECK(slices[2]["args"]["src"] == "0x700000000000");
  CHECK(slices[2]["args"]["src_space"] == "host");
  CHECK(slices[2]["args"]["effective_bytes"] == 8192);
  CHECK(slices[2]["args"]["error"] == "device address fault");
  // 999'999'999'999 ps is printed digit-exact.
  CHECK(t.json().find("\"ts\":999999.999999") != std::string::npos);
}

TEST_CASE("the trace keeps a bounded number of events and says how many it dropped", "[trace]") {
  Tracer t("dev", 1, 1, 10);
  for (int i = 0; i < 25; ++i) t.cp_step(i * 1000, 500);
  CHECK(t.events() == 10);
  CHECK(t.dropped() == 15);
  const auto doc = nlohmann::json::parse(t.json());
  CHECK(doc["otherData"]["dropped_events"] == 15);
  bool noted = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["name"] == "process_labels") {
      noted = e["args"]["labels"].get<std::string>().find("15 events") != std::string::npos;
    }
  }
  CHECK(noted);
  CHECK(Tracer::kMaxEvents == 1'000'000);
}
