// The run summary (mtia/trace/summary.h): computed in memory from a recording it equals, byte
// for byte, the summary computed from the trace.json written from that recording; text that
// is not a trace is rejected with a reason.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "mtia/isa/error_code.h"
#include "mtia/isa/packets.h"
#include "mtia/trace/sink.h"
#include "mtia/trace/summary.h"
#include "mtia/trace/trace_writer.h"
#include "must.h"

using namespace mtia::trace;
using Json = nlohmann::json;
using mtia::test::must;

namespace {

std::string config_json() {
  Json c;
  auto set = [&](const char* key, Json v) { c[key] = {{"value", v}, {"unit", ""}}; };
  set("name", "test-chip");
  set("pe_rows", 2);
  set("pe_cols", 2);
  set("clock_hz", 1e9);
  set("dpe_int8_macs_per_cycle", 64);
  set("dpe_fp16_macs_per_cycle", 32);
  set("dpe_fp32_macs_per_cycle", 8);
  set("se_vector_bytes", 64);
  set("dram_bandwidth_GBps", 100.5);
  set("sram_bandwidth_GBps", 1000);
  set("pcie_h2d_bandwidth_GBps", 31.5);
  set("pcie_d2h_bandwidth_GBps", 30);
  return c.dump(2);
}

DeviceInfo device() {
  DeviceInfo d;
  d.process_name = "dev";
  d.config_json = config_json();
  d.num_queues = 2;
  d.dma_engines = 2;
  d.pes = 4;
  return d;
}

const uint8_t kHost = static_cast<uint8_t>(mtia::isa::AddressSpace::kHost);

// A run of every kind of work the summary counts.
void record_run(Sink& sink) {
  HostCall call;
  call.thread = 1;
  call.name = "launch";
  call.packets.push_back({1, 11, 0, "gemm"});
  sink.host_call(call);
  // Launch 1 (named by the host call): DPE fp16 work and DRAM traffic.
  LaunchInfo a;
  a.queue = 1;
  a.seq = 11;
  a.grid_rows = 2;
  a.grid_cols = 2;
  a.start_ps = 1'000;
  sink.launch_begin(a);
  sink.pe_unit(0, Unit::kDpe, 1'000, 5'000, 4096, DpeClass::k16Bit);
  sink.pe_unit(1, Unit::kSe, 1'000, 2'000, 128, DpeClass::kFp32);
  sink.pe_unit(1, Unit::kDma, 1'000, 3'000, 2048, DpeClass::kFp32);
  sink.reservation({Memory::kDram, 1'000, 2'000, 2048}, /*pe_dma=*/true);
  sink.pe_kernel(0, 1'000, 6'000);
  sink.launch_end(9'000, 0);
  sink.packet({1, 1'000, 9'000, 11, 0, static_cast<uint8_t>(mtia::isa::Opcode::kLaunch), 0, 0});
  // Launch 2: no host call named it; it faulted.
  LaunchInfo b = a;
  b.queue = 0;
  b.seq = 3;
  b.image_addr = 0x100;
  b.grid_rows = 1;
  b.grid_cols = 1;
  b.start_ps = 10'000;
  sink.launch_begin(b);
  sink.pe_unit(0, Unit::kRe, 10'000, 10'500, 64, DpeClass::kFp32);
  sink.launch_end(12'000, static_cast<uint16_t>(mtia::isa::ErrorCode::kKernelFault));
  // Launch 3: still running, so in neither summary.
  b.start_ps = 20'000;
  sink.launch_begin(b);
  // Host DMA jobs of each kind, and one that faulted.
  DmaEvent h2d;
  h2d.start_ps = 0;
  h2d.end_ps = 33'888'127;
  h2d.bytes = 1 << 20;
  h2d.src_space = kHost;
  sink.dma(0, h2d);
  sink.reservation({Memory::kPcieH2D, 100'000, 33'288'127, 1 << 20}, false);
  DmaEvent d2h = h2d;
  d2h.src_space = 0;
  d2h.dst_space = kHost;
  d2h.bytes = 4096;
  sink.dma(1, d2h);
  DmaEvent d2d = d2h;
  d2d.dst_space = 0;
  sink.dma(0, d2d);
  DmaEvent fill = d2d;
  fill.fill = true;
  sink.dma(0, fill);
  DmaEvent fault = h2d;
  fault.error = static_cast<uint16_t>(mtia::isa::ErrorCode::kHostAddressFault);
  sink.dma(1, fault);
}

}  // namespace

TEST_CASE("the summary in memory equals the one read back from the trace it writes", "[trace]") {
  for (TraceLevel level : {TraceLevel::kUnits, TraceLevel::kKernels}) {
    Sink sink(device(), {level, 1'000'000});
    record_run(sink);
    const uint64_t now = 40'000'000;
    const TraceSummary s =
        must(sink.read([&](const Recording& r) { return summarize(r, level, now); }));
    const std::string text =
        sink.read([&](const Recording& r) { return trace_json(r, level, now); });
    CHECK(s.to_json() == must(summarize_trace_json(text)).to_json());

    CHECK(s.preset == "test-chip");
    CHECK(s.trace_level == trace_level_name(level));
    CHECK(s.simulated_time_ps == now);
    CHECK(s.peaks.pes == 4);
    CHECK(s.peaks.dpe_16bit_flops == Approx(2.0 * 32 * 4 * 1e9));
    REQUIRE(s.kernels.size() == 2);
    CHECK(s.kernels[0].name == "gemm");
    CHECK(s.kernels[0].time_ps == 8'000);
    CHECK(s.kernels[0].flops == 2 * 4096 + 128);
    CHECK(s.kernels[0].dram_bytes == 2048);
    CHECK(s.kernels[0].roof == "dpe 16-bit");
    CHECK(s.kernels[0].utilization.at("dpe") == Approx(4'000.0 / (8'000.0 * 4)));
    CHECK(s.kernels[1].name == "kernel@0x100+0x0");
    CHECK(s.kernels[1].failed == 1);
    CHECK(s.launches == 2);
    REQUIRE(s.copies.size() == 4);  // the faulted job is not counted
    CHECK(s.copies[0].kind == "host to device");
    CHECK(s.copies[0].time_ps == 33'888'127);
    CHECK(s.copies[1].kind == "device to host");
    CHECK(s.copies[2].kind == "device to device");
    CHECK(s.copies[3].kind == "fill");
    CHECK(s.memory.at("pcie_h2d").bytes == 1u << 20);
    CHECK(s.memory.at("dram").bytes == 2048);
    CHECK(s.complete);
  }
}

TEST_CASE("a truncated recording gives the same summary both ways and says it is incomplete",
          "[trace]") {
  Sink sink(device(), {TraceLevel::kUnits, 6});
  record_run(sink);
  const TraceSummary s =
      must(sink.read([&](const Recording& r) { return summarize(r, TraceLevel::kUnits, 1); }));
  const std::string text =
      sink.read([&](const Recording& r) { return trace_json(r, TraceLevel::kUnits, 1); });
  CHECK(s.to_json() == must(summarize_trace_json(text)).to_json());
  CHECK_FALSE(s.complete);
  CHECK(s.dropped_events > 0);
}

TEST_CASE("text that is not a trace is rejected with the reason", "[trace]") {
  auto rejects = [](const std::string& text, const std::string& why) {
    INFO(text);
    const mtia::isa::Failure f = mtia::test::failure(summarize_trace_json(text));
    CHECK(f.code == mtia::isa::ErrorCode::kInvalidArgument);
    CHECK_THAT(f.reason, Catch::StartsWith("not an mtia-emu trace: ") && Catch::Contains(why));
  };
  rejects("{", "invalid JSON");
  rejects("[]", "no traceEvents list");
  rejects(R"({"traceEvents": []})", "no otherData with format");
  rejects(R"({"traceEvents": [], "otherData": {"format": "other"}})", "no otherData with format");
  rejects(R"({"traceEvents": [], "otherData": {"format": "mtia-emu trace"}})",
          "no otherData.config");
  Json doc = {
      {"traceEvents", Json::array()},
      {"otherData", {{"format", "mtia-emu trace"}, {"config", Json::parse(config_json())}}}};
  doc["otherData"]["config"].erase("clock_hz");
  rejects(doc.dump(), "otherData.config.clock_hz is missing");
  doc["otherData"]["config"]["clock_hz"] = {{"value", "fast"}};
  rejects(doc.dump(), "otherData.config.clock_hz is missing");
  // The same check for a recording whose device has no usable configuration.
  DeviceInfo d = device();
  d.config_json = "not json";
  Sink sink(d, {TraceLevel::kKernels, 100});
  CHECK_FALSE(
      sink.read([](const Recording& r) { return summarize(r, TraceLevel::kKernels, 0); }).ok());
}
