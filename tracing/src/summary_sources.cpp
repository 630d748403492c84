// The two sources of a run summary: a recording in memory, and a trace.json read back.
#include <cmath>

#include "mtia/isa/error_code.h"
#include "mtia/isa/packets.h"
#include "mtia/trace/summary.h"
#include "packet_index.h"
#include "summary_input.h"

namespace mtia::trace {
namespace {

using detail::SummaryInput;
using Json = nlohmann::json;

isa::Failure bad_trace(const std::string& why) {
  return isa::reject(isa::ErrorCode::kInvalidArgument, "not an mtia-emu trace: " + why);
}

uint64_t ps_of(const Json& us) {
  // ts and dur are microseconds with 6 decimals: exact picoseconds. A negative or
  // non-numeric duration counts as none.
  if (!us.is_number()) return 0;
  const double ps = us.get<double>() * 1e6;
  return ps > 0 && ps < 1.8e19 ? static_cast<uint64_t>(std::llround(ps)) : 0;
}

uint64_t u64(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return 0;
  return it->get<uint64_t>();
}

// The launches and DMA jobs of a trace's events (those the parser kept).
void read_events(const Json& events, const char* const (&units)[kNumUnits], SummaryInput& in) {
  for (const Json& e : events) {
    if (!e.is_object()) continue;
    const std::string cat = e.value("cat", "");
    if (!e.contains("args") || !e["args"].is_object() || !e.contains("dur")) continue;
    const Json& a = e["args"];
    if (cat == "dma") {
      if (a.value("error", "") != isa::error_code_name(isa::ErrorCode::kNone)) continue;
      in.copies.push_back(
          {detail::copy_kind(e.value("name", "") == "fill", a.value("src_memory", "") == "host",
                             a.value("dst_memory", "") == "host"),
           u64(a, "bytes"), ps_of(e["dur"])});
      continue;
    }
    SummaryInput::Launch l;  // a launch
    l.name = a.value("kernel", e.value("name", "?"));
    l.dur_ps = a.contains("dur_ps") ? u64(a, "dur_ps") : ps_of(e["dur"]);
    l.pes = u64(a, "pes");
    l.ok = a.value("status", "ok") == "ok";
    l.flops = u64(a, "flops");
    l.dma_bytes = u64(a, "dma_bytes");
    l.dram_bytes = u64(a, "dram_bytes");
    l.sram_bytes = u64(a, "sram_bytes");
    l.dpe_macs[0] = u64(a, "dpe_macs_int8");
    l.dpe_macs[1] = u64(a, "dpe_macs_16bit");
    l.dpe_macs[2] = u64(a, "dpe_macs_fp32");
    l.se_elements = u64(a, "se_elements");
    if (a.contains("busy_ps") && a["busy_ps"].is_object()) {
      for (size_t u = 0; u < kNumUnits; ++u) l.busy_ps[u] = u64(a["busy_ps"], units[u]);
    }
    in.launches.push_back(std::move(l));
  }
}

}  // namespace

isa::Result<TraceSummary> summarize(const Recording& rec, TraceLevel level, uint64_t now_ps) {
  SummaryInput in;
  const Json config = Json::parse(rec.device.config_json, nullptr, false);
  if (!config.is_object()) return bad_trace("the device's configuration is not a JSON object");
  MTIA_RETURN_IF_ERROR(detail::read_config(config, in));
  in.trace_level = trace_level_name(level);
  in.complete = rec.complete();
  in.dropped_events = rec.dropped_all();
  in.simulated_time_ps = now_ps;

  const detail::PacketIndex index(rec);
  for (const Recording::Launch& l : rec.launches) {
    if (!l.ended) continue;  // not in the trace either
    SummaryInput::Launch x;
    x.name = index.launch_name(l.info);
    x.dur_ps = l.end_ps - l.info.start_ps;
    x.pes = uint64_t{l.info.grid_rows} * l.info.grid_cols;
    x.ok = l.error == 0;
    x.flops = l.stats.flops();
    x.dma_bytes = l.stats.work[static_cast<size_t>(Unit::kDma)];
    x.dram_bytes = l.stats.memory_bytes[static_cast<size_t>(Memory::kDram)];
    x.sram_bytes = l.stats.memory_bytes[static_cast<size_t>(Memory::kSram)];
    for (int d = 0; d < 3; ++d) x.dpe_macs[d] = l.stats.macs[d];
    x.se_elements = l.stats.work[static_cast<size_t>(Unit::kSe)];
    x.busy_ps = l.stats.busy_ps;
    in.launches.push_back(std::move(x));
  }
  const auto host = static_cast<uint8_t>(isa::AddressSpace::kHost);
  for (const Recording::Dma& d : rec.dmas) {
    const DmaEvent& e = d.event;
    if (e.error != static_cast<uint16_t>(isa::ErrorCode::kNone)) continue;
    if (e.link) continue;  // inter-chip transfers are not host copies (not in the summary)
    in.copies.push_back(
        {detail::copy_kind(e.fill, !e.fill && e.src_space == host, e.dst_space == host), e.bytes,
         e.end_ps >= e.start_ps ? e.end_ps - e.start_ps : 0});
  }
  for (size_t m = 0; m < kNumMemories; ++m) {
    in.memory_bytes[memory_name(static_cast<Memory>(m))] = rec.bandwidth[m].total_bytes();
  }
  return detail::compute_summary(in);
}

namespace {
isa::Result<TraceSummary> summarize_document(const Json& doc);
}  // namespace

isa::Result<TraceSummary> summarize_trace_json(std::string_view text) {
  // Keep only what the summary reads: launches, DMA jobs and the metadata. Unit slices,
  // counters and host calls are dropped as they are parsed, so large traces stay cheap.
  std::string top_key;  // the member of the root object being parsed
  const Json::parser_callback_t keep = [&top_key](int depth, Json::parse_event_t event,
                                                  Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key) top_key = parsed.get<std::string>();
    if (depth == 2 && event == Json::parse_event_t::object_end && top_key == "traceEvents") {
      auto cat = parsed.find("cat");
      if (cat == parsed.end() || !cat->is_string()) return false;
      const std::string& c = cat->get_ref<const std::string&>();
      return c == "launch" || c == "dma";
    }
    return true;
  };
  Json doc;
  try {  // nlohmann reports a parse error only by exception: it ends here
    doc = Json::parse(text.begin(), text.end(), keep);
  } catch (const Json::exception& e) {
    return bad_trace(std::string("invalid JSON: ") + e.what());
  }
  try {  // nlohmann's value() reports a member of another type only by exception
    return summarize_document(doc);
  } catch (const Json::exception& e) {
    return bad_trace(std::string("a member has the wrong type: ") + e.what());
  }
}

namespace {

isa::Result<TraceSummary> summarize_document(const Json& doc) {
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return bad_trace("no traceEvents list");
  }
  if (!doc.contains("otherData") || !doc["otherData"].is_object() ||
      doc["otherData"].value("format", "") != "mtia-emu trace") {
    return bad_trace(
        "no otherData with format \"mtia-emu trace\" (written by Device::write_artifacts)");
  }
  const Json& meta = doc["otherData"];
  if (!meta.contains("config") || !meta["config"].is_object()) {
    return bad_trace("no otherData.config");
  }

  SummaryInput in;
  in.trace_level = meta.value("trace_level", "");
  in.complete = meta.value("complete", true);
  in.dropped_events = u64(meta, "dropped_events");
  in.simulated_time_ps = u64(meta, "simulated_time_ps");
  MTIA_RETURN_IF_ERROR(detail::read_config(meta["config"], in));

  const char* const units[] = {"dpe", "se", "re", "mlu", "dma"};
  read_events(doc["traceEvents"], units, in);
  const Json mem = meta.value("memory", Json::object());
  for (const char* r : {"dram", "sram", "pcie_h2d", "pcie_d2h"}) {
    if (mem.contains(r)) in.memory_bytes[r] = u64(mem[r], "payload_bytes");
  }
  return detail::compute_summary(in);
}

}  // namespace
}  // namespace mtia::trace
