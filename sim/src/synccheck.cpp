#include "synccheck.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "mtia/isa/pe/pe_ops.h"

namespace mtia::sim::detail {
namespace {

void normalize(std::vector<pe::Extent>& runs) {
  // A DMA's or a tile's rows mostly come in address order already.
  const auto by_lo = [](const pe::Extent& a, const pe::Extent& b) { return a.lo < b.lo; };
  if (!std::is_sorted(runs.begin(), runs.end(), by_lo)) std::sort(runs.begin(), runs.end(), by_lo);
  size_t out = 0;
  for (const pe::Extent& r : runs) {
    if (r.lo >= r.hi) continue;
    if (out != 0 && runs[out - 1].hi >= r.lo) {
      runs[out - 1].hi = std::max(runs[out - 1].hi, r.hi);
    } else {
      runs[out++] = r;
    }
  }
  runs.resize(out);
}

// The lowest bytes both sorted, merged run lists hold (empty if none).
isa::ByteSpan first_overlap(const std::vector<pe::Extent>& a, const std::vector<pe::Extent>& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint64_t lo = std::max(a[i].lo, b[j].lo), hi = std::min(a[i].hi, b[j].hi);
    if (lo < hi) return {lo, hi};
    (a[i].hi <= b[j].hi ? i : j)++;
  }
  return {};
}

// The first run of sorted, merged `runs` that overlaps [lo, hi), clipped to it.
isa::ByteSpan overlap_with(const std::vector<pe::Extent>& runs, uint64_t lo, uint64_t hi) {
  auto it = std::upper_bound(runs.begin(), runs.end(), lo,
                             [](uint64_t v, const pe::Extent& r) { return v < r.hi; });
  if (it == runs.end() || it->lo >= hi) return {};
  return {std::max(lo, it->lo), std::min(hi, it->hi)};
}

}  // namespace

void InFlight::issued(const char* kind, uint64_t pc, uint64_t ra, uint64_t tag, Bytes&& bytes) {
  normalize(bytes.reads);
  normalize(bytes.writes);
  if (bytes.reads.empty() && bytes.writes.empty()) return;
  ops_.push_back(Op{kind, pc, ra, tag, std::move(bytes)});
}

void InFlight::waited(uint64_t tag) {
  std::erase_if(ops_, [tag](const Op& op) { return op.tag == tag; });
}

std::string InFlight::report(const std::string& who, bool write, const Op& op, bool op_writes,
                             isa::ByteSpan overlap) {
  return fmt::format(
      "synccheck: {} {} the {} local-store bytes at 0x{:x}..0x{:x}, which the {} at pc 0x{:x} "
      "(tag {}) {} and this PE has not waited for (pe.wait on tag {}, pe.waitall, or a pe.poll "
      "that saw it done)",
      who, write ? "writes" : "reads", overlap.size(), MTIA_PE_LS_BASE + overlap.lo,
      MTIA_PE_LS_BASE + overlap.hi - 1, op.kind, op.pc, op.tag,
      op_writes ? "still writes" : "still reads", op.tag);
}

std::string InFlight::conflict(const char* kind, uint64_t pc, uint64_t tag, Bytes& bytes,
                               pe::LineTable::Frame& in_flight) const {
  if (ops_.empty()) return {};
  normalize(bytes.reads);
  normalize(bytes.writes);
  for (const Op& op : ops_) {
    // Reading or overwriting its output, then overwriting its input.
    const isa::ByteSpan raw = first_overlap(bytes.reads, op.bytes.writes);
    const isa::ByteSpan waw = first_overlap(bytes.writes, op.bytes.writes);
    const isa::ByteSpan war = first_overlap(bytes.writes, op.bytes.reads);
    if (raw.size() == 0 && waw.size() == 0 && war.size() == 0) continue;
    in_flight = {op.pc, op.ra};
    const std::string who = fmt::format("{} at pc 0x{:x} (tag {})", kind, pc, tag);
    if (raw.size() != 0 && (waw.size() == 0 || raw.lo <= waw.lo)) {
      return report(who, false, op, true, raw);
    }
    if (waw.size() != 0) return report(who, true, op, true, waw);
    return report(who, true, op, false, war);
  }
  return {};
}

std::string InFlight::core_access(uint64_t pc, uint64_t lo, uint64_t hi, bool write,
                                  pe::LineTable::Frame& in_flight) const {
  for (const Op& op : ops_) {
    isa::ByteSpan hit = overlap_with(op.bytes.writes, lo, hi);
    bool op_writes = true;
    if (hit.size() == 0 && write) {
      hit = overlap_with(op.bytes.reads, lo, hi);
      op_writes = false;
    }
    if (hit.size() == 0) continue;
    in_flight = {op.pc, op.ra};
    const std::string who =
        fmt::format("a {}-byte {} at pc 0x{:x}", hi - lo, write ? "store" : "load", pc);
    return report(who, write, op, op_writes, hit);
  }
  return {};
}

}  // namespace mtia::sim::detail
