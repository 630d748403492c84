#include "trace.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "mtia/isa/decode.h"
#include "mtia/isa/error_code.h"
#include "mtia/isa/packets.h"

namespace mtia::sim::detail {
namespace {

constexpr uint32_t kCpTrack = 1;
constexpr uint32_t kQueueTrack0 = 100;
constexpr uint32_t kDmaTrack0 = 200;
constexpr uint32_t kPeTrack0 = 300;

// Simulated picoseconds as trace microseconds, exactly (6 decimals).
void append_us(std::string& out, uint64_t ps) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%" PRIu64 ".%06" PRIu64, ps / 1'000'000, ps % 1'000'000);
  out += buf;
}

void append_u64(std::string& out, uint64_t v) {
  out += std::to_string(v);
}

void append_hex(std::string& out, uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"0x%" PRIx64 "\"", v);
  out += buf;
}

const char* space_name(uint8_t space) {
  return space == static_cast<uint8_t>(isa::AddressSpace::kHost) ? "host" : "device";
}

const char* opcode_label(uint8_t op) {
  return op < static_cast<uint8_t>(isa::Opcode::kCount)
             ? isa::opcode_name(static_cast<isa::Opcode>(op))
             : "unknown";
}

const char* error_label(uint16_t e) {
  return e < static_cast<uint16_t>(isa::ErrorCode::kCount)
             ? isa::error_code_name(static_cast<isa::ErrorCode>(e))
             : "unknown";
}

}  // namespace

Tracer::Tracer(std::string process_name, uint32_t num_queues, uint32_t num_dma_engines,
               size_t max_events)
    : process_name_(std::move(process_name)),
      num_queues_(num_queues),
      num_dma_engines_(num_dma_engines),
      max_events_(max_events) {}

bool Tracer::room() {
  if (events_.size() < max_events_) return true;
  ++dropped_;
  return false;
}

void Tracer::push(const Event& e) {
  if (room()) events_.push_back(e);
}

void Tracer::cp_step(uint64_t start_ps, uint64_t dur_ps) {
  push({start_ps, dur_ps, kCpTrack, Kind::kCpStep, 0, 0, 0, 0, 0, {}});
}

void Tracer::packet(uint32_t queue, uint64_t start_ps, uint64_t end_ps, uint64_t seq,
                    uint64_t index, uint8_t opcode, uint16_t status, uint16_t error) {
  const uint64_t dur = end_ps >= start_ps ? end_ps - start_ps : 0;
  push({start_ps,
        dur,
        kQueueTrack0 + queue,
        Kind::kPacket,
        opcode,
        0,
        0,
        status,
        error,
        {seq, index, 0, 0}});
}

void Tracer::dma(uint32_t engine, const DmaEvent& d) {
  const uint64_t dur = d.end_ps >= d.start_ps ? d.end_ps - d.start_ps : 0;
  push({d.start_ps,
        dur,
        kDmaTrack0 + engine,
        Kind::kDma,
        static_cast<uint8_t>(d.fill ? 1 : 0),
        d.src_space,
        d.dst_space,
        d.error,
        0,
        {d.bytes, d.src, d.dst, d.effective_bytes}});
}

void Tracer::pe_op(uint32_t pe, const char* name, uint64_t start_ps, uint64_t end_ps) {
  pe_tracks_ = std::max(pe_tracks_, pe + 1);
  const uint64_t dur = end_ps >= start_ps ? end_ps - start_ps : 0;
  push({start_ps,
        dur,
        kPeTrack0 + pe,
        Kind::kPe,
        0,
        0,
        0,
        0,
        0,
        {reinterpret_cast<uintptr_t>(name), 0, 0, 0}});
}

std::string Tracer::json() const {
  std::string out;
  out.reserve(256 + events_.size() * 200);
  out += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  auto meta = [&](const char* what, uint32_t tid, const std::string& name) {
    out += "{\"ph\":\"M\",\"pid\":0,\"tid\":" + std::to_string(tid) + ",\"name\":\"" + what +
           "\",\"args\":{\"name\":" + nlohmann::json(name).dump() + "}},\n";
  };
  auto sort_index = [&](uint32_t tid) {
    out += "{\"ph\":\"M\",\"pid\":0,\"tid\":" + std::to_string(tid) +
           ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":" + std::to_string(tid) +
           "}},\n";
  };
  meta("process_name", 0, process_name_);
  meta("thread_name", kCpTrack, "command processor");
  sort_index(kCpTrack);
  for (uint32_t q = 0; q < num_queues_; ++q) {
    meta("thread_name", kQueueTrack0 + q, "queue " + std::to_string(q));
    sort_index(kQueueTrack0 + q);
  }
  for (uint32_t e = 0; e < num_dma_engines_; ++e) {
    meta("thread_name", kDmaTrack0 + e, "dma " + std::to_string(e));
    sort_index(kDmaTrack0 + e);
  }
  for (uint32_t p = 0; p < pe_tracks_; ++p) {
    meta("thread_name", kPeTrack0 + p, "pe " + std::to_string(p));
    sort_index(kPeTrack0 + p);
  }
  if (dropped_ > 0) {
    // A visible note in the process label, so a truncated trace is not mistaken for the run.
    out +=
        "{\"ph\":\"M\",\"pid\":0,\"tid\":0,\"name\":\"process_labels\",\"args\":{\"labels\":"
        "\"trace truncated: " +
        std::to_string(dropped_) + " events after the first " + std::to_string(max_events_) +
        " were dropped\"}},\n";
  }
  bool first = true;
  for (const Event& e : events_) {
    if (!first) out += ",\n";
    first = false;
    out += "{\"ph\":\"X\",\"pid\":0,\"tid\":";
    append_u64(out, e.track);
    out += ",\"ts\":";
    append_us(out, e.ts_ps);
    out += ",\"dur\":";
    append_us(out, e.dur_ps);
    switch (e.kind) {
      case Kind::kCpStep:
        out += ",\"name\":\"dispatch\"}";
        break;
      case Kind::kPacket:
        out += ",\"name\":\"";
        out += opcode_label(e.b0);
        out += "\",\"args\":{\"seq\":";
        append_u64(out, e.a[0]);
        out += ",\"index\":";
        append_u64(out, e.a[1]);
        out += ",\"opcode\":\"";
        out += opcode_label(e.b0);
        out += "\",\"status\":\"";
        out += e.h0 == 0 ? "ok" : "error";
        out += "\",\"error\":\"";
        out += error_label(e.h1);
        out += "\"}}";
        break;
      case Kind::kDma:
        out += e.b0 ? ",\"name\":\"fill\"" : ",\"name\":\"copy\"";
        out += ",\"args\":{\"bytes\":";
        append_u64(out, e.a[0]);
        if (!e.b0) {
          out += ",\"src\":";
          append_hex(out, e.a[1]);
          out += ",\"src_space\":\"";
          out += space_name(e.b1);
          out += "\"";
        }
        out += ",\"dst\":";
        append_hex(out, e.a[2]);
        out += ",\"dst_space\":\"";
        out += space_name(e.b2);
        out += "\",\"effective_bytes\":";
        append_u64(out, e.a[3]);
        out += ",\"error\":\"";
        out += error_label(e.h0);
        out += "\"}}";
        break;
      case Kind::kPe:
        out += ",\"name\":";
        out += nlohmann::json(reinterpret_cast<const char*>(static_cast<uintptr_t>(e.a[0]))).dump();
        out += "}";
        break;
    }
  }
  out += "\n],\"otherData\":{\"process\":" + nlohmann::json(process_name_).dump() +
         ",\"time_unit\":\"ts and dur are microseconds of simulated time\",\"events\":" +
         std::to_string(events_.size()) + ",\"dropped_events\":" + std::to_string(dropped_) +
         "}}\n";
  return out;
}

}  // namespace mtia::sim::detail
