#include "racecheck.h"

#include <algorithm>
#include <tuple>

namespace mtia::sim::detail {

void RaceLog::add(uint64_t pc, uint64_t ra, bool write, uint64_t addr, const uint64_t* strides,
                  const mtia_pe_dma_desc& d) {
  for_each_dma_row(addr, strides, d, kMaxRunsPerDma, [&](uint64_t lo, uint64_t hi) {
    runs_.push_back({lo, hi, pc, ra, write});
  });
  if (runs_.size() >= 2 * compacted_ + 4096) compact();
}

void RaceLog::clear() {
  runs_.clear();
  compacted_ = 0;
}

void RaceLog::compact() {
  std::sort(runs_.begin(), runs_.end(), [](const Run& x, const Run& y) {
    return std::tie(x.write, x.pc, x.ra, x.lo, x.hi) < std::tie(y.write, y.pc, y.ra, y.lo, y.hi);
  });
  size_t out = 0;
  for (size_t i = 0; i < runs_.size(); ++i) {
    Run& last = runs_[out - (out != 0)];
    if (out != 0 && last.write == runs_[i].write && last.pc == runs_[i].pc &&
        last.ra == runs_[i].ra && runs_[i].lo <= last.hi) {
      last.hi = std::max(last.hi, runs_[i].hi);
    } else {
      runs_[out++] = runs_[i];
    }
  }
  runs_.resize(out);
  compacted_ = out;
}

std::span<const RaceLog::Run> RaceLog::merged() {
  if (compacted_ != runs_.size()) compact();
  return runs_;
}

std::optional<Race> find_race(std::span<RaceLog* const> logs) {
  struct Access {
    uint32_t pe;
    RaceLog::Run run;
  };
  std::vector<Access> all;
  size_t writers = 0;
  for (uint32_t pe = 0; pe < logs.size(); ++pe) {
    if (logs[pe]->empty()) continue;
    bool writes = false;
    for (const RaceLog::Run& r : logs[pe]->merged()) {
      all.push_back({pe, r});
      writes |= r.write;
    }
    writers += writes;
  }
  if (writers == 0) return std::nullopt;  // reads never race
  std::sort(all.begin(), all.end(), [](const Access& x, const Access& y) {
    return std::tie(x.run.lo, x.pe, x.run.write, x.run.pc, x.run.ra, x.run.hi) <
           std::tie(y.run.lo, y.pe, y.run.write, y.run.pc, y.run.ra, y.run.hi);
  });
  // Sweep in address order: the runs still open when a run starts are the ones it overlaps,
  // from its first byte on, so the first conflict found starts at the lowest address.
  std::optional<Race> best;
  std::vector<const Access*> open;
  for (const Access& x : all) {
    if (best && x.run.lo > best->lo) break;
    std::erase_if(open, [&](const Access* y) { return y->run.hi <= x.run.lo; });
    for (const Access* y : open) {
      if (y->pe == x.pe || !(x.run.write || y->run.write)) continue;
      const Access& a = y->pe < x.pe ? *y : x;
      const Access& b = y->pe < x.pe ? x : *y;
      if (best && std::tie(best->pe_a, best->pe_b) <= std::tie(a.pe, b.pe)) continue;
      best = Race{a.pe, b.pe, a.run, b.run, x.run.lo, std::min(x.run.hi, y->run.hi)};
    }
    open.push_back(&x);
  }
  return best;
}

}  // namespace mtia::sim::detail
