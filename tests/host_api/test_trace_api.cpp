// Performance traces through the public API (mtia/trace.h): turning them on (option, call,
// environment), flows from every API call to its device work, the host clock, the run summary
// computed from the trace alone against independent figures (the copy timing formula of
// docs/architecture.md, m*n*k multiply-accumulates of a matmul), the event bound, and the same
// trace on every run.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "device_helpers.h"
#include "mtia/isa/pe/pe_ops.h"
#include "scoped_env.h"

using namespace mtia;
using Json = nlohmann::json;

namespace {

using mtia::test::ScopedEnv;

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("mtia_trace_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

Json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return Json::parse(in);
}

std::vector<Json> slices(const Json& trace, const std::string& cat) {
  std::vector<Json> out;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e.value("cat", "") == cat) out.push_back(e);
  }
  return out;
}

uint64_t ps(const Json& us) {
  return static_cast<uint64_t>(std::llround(us.get<double>() * 1e6));
}

DeviceOptions traced(TraceLevel level, uint64_t max_events = 0) {
  DeviceOptions o;
  o.trace = level;
  o.trace_max_events = max_events;
  return o;
}

// Two uploads and one copy back.
void copies(Device& dev) {
  std::vector<uint8_t> host(1 << 20);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 13);
  DevicePtr a = dev.malloc(host.size());
  dev.copy(a, host.data(), host.size());  // 1 MiB host to device, synchronous
  dev.copy_async(a, host.data(), 4096);
  std::vector<uint8_t> back(4096);
  dev.copy(back.data(), a, back.size());
  dev.free(a);
  REQUIRE(back[100] == host[100]);
}

#ifdef MTIA_KERNEL_LIBRARY_ELF
// c[m,n] = a[m,k] @ b[k,n], contiguous, in `in` dtype with fp32 output, on 8x8 PEs.
void matmul(Device& dev, const KernelModule& lib, uint8_t in, int64_t m, int64_t n, int64_t k) {
  const int64_t esize = in == MTIA_PE_DT_FP32 ? 4 : 2;
  DevicePtr a = dev.malloc(m * k * esize), b = dev.malloc(k * n * esize), c = dev.malloc(m * n * 4);
  dev.memset(a, 0, m * k * esize);
  dev.memset(b, 0, k * n * esize);
  dev.launch(lib.kernel("matmul"), Grid{8, 8},
             {c, a, b, Arg::dtype(in), Arg::dtype(MTIA_PE_DT_FP32), m, n, k, k, int64_t{1}, n,
              int64_t{1}, n, int64_t{1}});
  dev.synchronize();
  dev.free(a);
  dev.free(b);
  dev.free(c);
}
#endif

}  // namespace

TEST_CASE(
    "a traced run: every API call's packets flow to device work, the host clock follows "
    "what it waited for, and the summary is computed from the trace",
    "[trace]") {
  const auto dir = temp_dir("run");
  {
    Device dev = Device::open(traced(TraceLevel::kUnits));
    CHECK(dev.trace_level() == TraceLevel::kUnits);
    copies(dev);
#ifdef MTIA_KERNEL_LIBRARY_ELF
    const KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);
    matmul(dev, lib, MTIA_PE_DT_FP32, 128, 128, 64);
    matmul(dev, lib, MTIA_PE_DT_FP16, 128, 256, 64);
#endif
    dev.write_artifacts(dir.string());
  }
  const Json trace = read_json(dir / "trace.json");
  for (const char* f : {"stats.json", "config.json", "summary.json"}) {
    INFO(f);
    CHECK(std::filesystem::file_size(dir / f) > 0);
  }

  // Every packet an API call submitted is linked: submit -> queue -> ... -> completion.
  std::map<uint64_t, std::vector<std::string>> flows;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e.contains("bind_id")) {
      flows[e["bind_id"].get<uint64_t>()].push_back(e["cat"]);
    }
  }
  const auto submits = slices(trace, "submit");
  CHECK(flows.size() == submits.size());
  for (const auto& [id, cats] : flows) {
    INFO("flow " << id);
    REQUIRE(cats.size() >= 3);
    CHECK(cats.front() == "submit");
    CHECK(cats[1] == "packet");
    CHECK(cats.back() == "completion");
  }
  // The DMA job of each copy carries its packet's flow.
  for (const Json& d : slices(trace, "dma")) CHECK(d.contains("bind_id"));

  // The synchronous 1 MiB upload: its call starts at the host clock 0 and ends when its
  // packet did, 100 ns setup + 2^20 B / 31.5 GB/s + 500 ns after dispatch
  // (docs/architecture.md); the next call starts there.
  const auto calls = slices(trace, "host");
  const Json* upload = nullptr;
  size_t upload_index = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i]["name"] == "copy" &&
        calls[i]["args"]["detail"] == "host to device, 1048576 bytes, stream 0") {
      upload = &calls[i];
      upload_index = i;
    }
  }
  REQUIRE(upload != nullptr);
  uint64_t dispatch = 0;
  for (const Json& p : slices(trace, "packet")) {
    if (p["args"]["opcode"] == "DMA copy" && p["args"]["seq"] == 1) dispatch = ps(p["ts"]);
  }
  CHECK(ps((*upload)["ts"]) == 0);
  CHECK(ps((*upload)["ts"]) + ps((*upload)["dur"]) == dispatch + 33'888'127);
  REQUIRE(upload_index + 1 < calls.size());
  CHECK(ps(calls[upload_index + 1]["ts"]) == dispatch + 33'888'127);

  // The summary, from the trace alone, equals summary.json.
  const TraceSummary s = summarize_trace_file((dir / "trace.json").string());
  std::ifstream in(dir / "summary.json");
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(written == s.to_json());
  CHECK(s.preset == "mtia-v2");
  CHECK(s.trace_level == "units");
  CHECK(s.complete);
  REQUIRE(s.copies.size() >= 2);
  CHECK(s.copies[0].kind == "host to device");
  CHECK(s.copies[0].jobs == 2);
  CHECK(s.copies[0].bytes == (1u << 20) + 4096);
  CHECK(s.copies[1].kind == "device to host");
  CHECK(s.copies[1].bytes == 4096);
  CHECK(s.memory.at("pcie_h2d").bytes == (1u << 20) + 4096);
  CHECK(s.memory.at("pcie_d2h").bytes == 4096);
  CHECK(s.peaks.pes == 64);
  CHECK(s.peaks.dpe_fp32_flops == Approx(2.0 * 256 * 64 * 1.35e9));
  CHECK(s.peaks.memory_Bps.at("dram") == Approx(204.8e9));
#ifdef MTIA_KERNEL_LIBRARY_ELF
  REQUIRE(s.kernels.size() == 1);  // both launches are "matmul"
  const KernelSummary& k = s.kernels[0];
  CHECK(k.name == "matmul");
  CHECK(k.launches == 2);
  CHECK(k.failed == 0);
  CHECK(k.dpe_macs[2] == 128 * 128 * 64);  // fp32: m*n*k multiply-accumulates
  CHECK(k.dpe_macs[1] == 128 * 256 * 64);  // fp16
  CHECK(k.dpe_macs[0] == 0);
  CHECK(k.flops == 2 * (k.dpe_macs[1] + k.dpe_macs[2]) + k.se_elements);
  // Each operand crosses local DMA at least once.
  CHECK(k.bytes >=
        4 * (128 * 64 + 64 * 128 + 128 * 128) + 2 * (128 * 64 + 64 * 256) + 4 * 128 * 256);
  CHECK(k.roof == "dpe 16-bit");  // more of its MACs had 16-bit inputs
  // DRAM traffic: each operand crosses DRAM at least once, and no more than local DMA moved.
  CHECK(k.dram_bytes >=
        4 * (128 * 64 + 64 * 128 + 128 * 128) + 2 * (128 * 64 + 64 * 256) + 4 * 128 * 256);
  CHECK(k.dram_bytes <= 2 * k.bytes);
  CHECK(k.intensity == Approx(double(k.flops) / double(k.dram_bytes)));
  CHECK(k.ridge == Approx(s.peaks.dpe_16bit_flops / 204.8e9));
  CHECK(k.bound == (k.intensity >= k.ridge ? "compute" : "memory"));
  CHECK(k.achieved_flops <= k.peak_flops);
  CHECK(k.utilization.at("dpe") > 0);
  CHECK(k.utilization.at("dpe") <= 1);
  CHECK(s.launches == 2);
  CHECK(s.utilization.at("dma") > 0);
  // The launch slices name their kernel; unit slices exist at this level.
  for (const Json& l : slices(trace, "launch")) CHECK(l["name"] == "matmul");
  CHECK_FALSE(slices(trace, "unit").empty());
#endif
  const std::string text = s.to_text();
  CHECK_THAT(text, Catch::Contains("run summary: mtia-v2"));
  CHECK_THAT(text, Catch::Contains("host to device"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("tracing is off unless asked for; set_trace_level turns it on and off", "[trace]") {
  ::unsetenv("MTIA_EMU_TRACE");
  const auto dir = temp_dir("toggle");
  {
    Device dev = Device::open();
    CHECK(dev.trace_level() == TraceLevel::kOff);
    copies(dev);  // not recorded
    dev.set_trace_level(TraceLevel::kKernels);
    CHECK(dev.trace_level() == TraceLevel::kKernels);
    test::check_device_works(dev);  // three copies, recorded
    dev.set_trace_level(TraceLevel::kOff);
    copies(dev);  // not recorded
    dev.write_artifacts(dir.string());
  }
  const Json trace = read_json(dir / "trace.json");
  CHECK(slices(trace, "dma").size() == 3);
  CHECK(slices(trace, "submit").size() == 3);
  const Json summary = read_json(dir / "summary.json");
  CHECK(summary["trace_level"] == "off");  // the level when it was written
  std::filesystem::remove_all(dir);
}

TEST_CASE("MTIA_EMU_TRACE and MTIA_EMU_TRACE_MAX_EVENTS set the trace; bad values are named",
          "[trace]") {
  {
    ScopedEnv env("MTIA_EMU_TRACE", "kernels");
    Device dev = Device::open();
    CHECK(dev.trace_level() == TraceLevel::kKernels);
  }
  {
    ScopedEnv env("MTIA_EMU_TRACE", "kernels");
    Device dev = Device::open(traced(TraceLevel::kOff));  // the option wins
    CHECK(dev.trace_level() == TraceLevel::kOff);
  }
  {
    ScopedEnv env("MTIA_EMU_TRACE", "everything");
    test::expect_error(ErrorKind::kInvalidArgument,
                       "MTIA_EMU_TRACE=everything is not a trace level", [] { Device::open(); });
  }
  {
    ScopedEnv env("MTIA_EMU_TRACE_MAX_EVENTS", "12k");
    test::expect_error(ErrorKind::kInvalidArgument,
                       "MTIA_EMU_TRACE_MAX_EVENTS=12k is not a positive number",
                       [] { Device::open(traced(TraceLevel::kKernels)); });
  }
  CHECK(parse_trace_level("units") == TraceLevel::kUnits);
  CHECK(std::string(trace_level_name(TraceLevel::kKernels)) == "kernels");
  CHECK_FALSE(parse_trace_level("Units").has_value());
}

#ifdef MTIA_KERNEL_LIBRARY_ELF
TEST_CASE("at the event limit unit slices go first, so the summary stays complete", "[trace]") {
  const auto dir = temp_dir("limit");
  {
    Device dev = Device::open(traced(TraceLevel::kUnits, 400));
    const KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);
    matmul(dev, lib, MTIA_PE_DT_FP32, 128, 128, 512);
    dev.write_artifacts(dir.string());
  }
  const Json trace = read_json(dir / "trace.json");
  const Json& meta = trace["otherData"];
  CHECK(meta["max_events"] == 400);
  CHECK(meta["dropped_detail_events"].get<uint64_t>() > 0);
  CHECK(meta["complete"] == true);
  CHECK(meta["events"].get<uint64_t>() <= 400);
  CHECK(slices(trace, "unit").size() <= 300);
  const TraceSummary s = summarize_trace_file((dir / "trace.json").string());
  CHECK(s.launches == 1);
  // The statistics come from the launch, not from the unit slices that were dropped.
  CHECK(s.kernels.at(0).dpe_macs[2] == 128 * 128 * 512);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the same program gives the same trace, apart from host wall-clock fields", "[trace]") {
  auto run = [](const std::string& name) {
    const auto dir = temp_dir(name);
    {
      Device dev = Device::open(traced(TraceLevel::kUnits));
      const KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);
      copies(dev);
      matmul(dev, lib, MTIA_PE_DT_FP32, 64, 96, 48);
      dev.write_artifacts(dir.string());
    }
    Json trace = read_json(dir / "trace.json");
    std::filesystem::remove_all(dir);
    for (Json& e : trace["traceEvents"]) {
      if (!e.contains("args")) continue;
      Json& a = e["args"];
      for (const char* k : {"wall_start_us", "wall_us"}) a.erase(k);
    }
    return trace;
  };
  const Json a = run("same_a"), b = run("same_b");
  REQUIRE(a["traceEvents"].size() == b["traceEvents"].size());
  for (size_t i = 0; i < a["traceEvents"].size(); ++i) {
    INFO("event " << i);
    REQUIRE(a["traceEvents"][i] == b["traceEvents"][i]);
  }
  CHECK(a["otherData"] == b["otherData"]);
}
#endif

TEST_CASE("summarize_trace says what is wrong with something that is not a trace", "[trace]") {
  test::expect_error(ErrorKind::kInvalidArgument, "invalid JSON", [] { summarize_trace("{oops"); });
  test::expect_error(ErrorKind::kInvalidArgument, "no traceEvents list",
                     [] { summarize_trace("{\"a\": 1}"); });
  test::expect_error(ErrorKind::kInvalidArgument, "format \"mtia-emu trace\"",
                     [] { summarize_trace("{\"traceEvents\": []}"); });
  test::expect_error(ErrorKind::kInvalidArgument, "otherData.config.clock_hz is missing", [] {
    summarize_trace(
        "{\"otherData\":{\"format\":\"mtia-emu trace\",\"config\":{\"pe_rows\":{\"value\":8},"
        "\"pe_cols\":{\"value\":8}}},\"traceEvents\":[]}");
  });
  test::expect_error(ErrorKind::kInvalidArgument, "cannot open trace '/nonexistent/trace.json'",
                     [] { summarize_trace_file("/nonexistent/trace.json"); });
}
