// The `sort` kernel of kernels/lib/sort.c against a std::stable_sort reference with PyTorch's
// order (NaN largest, -0.0 == 0.0, ties in index order; descending: NaN first): every dtype,
// ascending and descending, rank windows (topk, kthvalue), the median modes (NaN wins, NaN
// skipped), strided inputs and outputs, lines in the local store and long lines merged through
// the DRAM scratch, on 1, 4 and 64 PEs and both local-store sizes; every error status, which
// must leave the outputs untouched.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "check.h"

using namespace kt;

namespace {

constexpr int64_t kNoScratch = 17;  // sort.c's own status
constexpr int64_t kDescending = 1, kNanWins = 2, kNanSkip = 4, kUnstable = 8;

const Module& lib() {
  return Module::library();
}

uint64_t bits_at(const HostView& t, const Shape& i) {
  uint64_t b = 0;
  std::memcpy(&b, t.host.data() + t.offset(i) * dt_size(t.dt), dt_size(t.dt));
  return b;
}

// Values with many ties, and for floats the special ones: +-0, +-inf, NaNs of both signs.
void fill_sort_values(HostView& t, std::mt19937& rng) {
  const unsigned es = dt_size(t.dt);
  std::uniform_int_distribution<int> pick(0, 15);
  for (size_t k = 0; k < t.host.size() / es; ++k) {
    uint8_t* p = t.host.data() + k * es;
    const int c = pick(rng);
    if (t.dt == kBool) {
      store_elem(kBool, p, c & 1);
    } else if (dt_float(t.dt)) {
      const double inf = std::numeric_limits<double>::infinity();
      const double specials[] = {0.0, -0.0, inf, -inf, 1.5, -1.5};
      if (c < 6) {
        store_elem(t.dt, p, specials[c]);
      } else if (c < 8) {  // NaNs, signed, with a payload
        const uint64_t nan = t.dt == kF32 ? (c == 6 ? 0x7fc00001u : 0xffc00000u)
                                          : (c == 6 ? (t.dt == kF16 ? 0x7e01u : 0x7fc1u) : 0xffc0u);
        std::memcpy(p, &nan, es);
      } else {
        store_elem(t.dt, p, round_to(t.dt, std::uniform_int_distribution<int>(-40, 40)(rng) / 8.0));
      }
    } else if (t.dt == kI64 && c < 4) {
      const int64_t ext[] = {std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max(), -(int64_t(1) << 62) - 3,
                             (int64_t(1) << 62) + 5};
      std::memcpy(p, &ext[c], 8);
    } else if (t.dt == kI32 && c < 2) {
      const int32_t ext[] = {std::numeric_limits<int32_t>::min(),
                             std::numeric_limits<int32_t>::max()};
      std::memcpy(p, &ext[c], 4);
    } else if (t.dt == kI8 && c < 2) {
      store_elem(kI8, p, c == 0 ? -128 : 127);
    } else {
      store_elem(t.dt, p, std::uniform_int_distribution<int>(-6, 6)(rng));
    }
  }
}

// PyTorch's order of one line, NaN largest: stable (std::stable_sort), or with stable=False
// the CPU's std::sort of (value, index) pairs compared by value, whose ties end in introsort's
// order (the host's libstdc++ runs the same algorithm as the one PyTorch was built with).
std::vector<int64_t> ref_order(const std::vector<double>& v, bool descending, bool introsort) {
  auto less = [descending](double x, double y) {
    if (descending) return (std::isnan(x) && !std::isnan(y)) || x > y;
    return (!std::isnan(x) && std::isnan(y)) || x < y;
  };
  std::vector<std::pair<double, int64_t>> p(v.size());
  for (size_t j = 0; j < v.size(); ++j) p[j] = {v[j], int64_t(j)};
  auto cmp = [&](const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
    return less(a.first, b.first);
  };
  if (introsort) {
    std::sort(p.begin(), p.end(), cmp);
  } else {
    std::stable_sort(p.begin(), p.end(), cmp);
  }
  std::vector<int64_t> idx(v.size());
  for (size_t j = 0; j < v.size(); ++j) idx[j] = p[j].second;
  return idx;
}

struct SortCase {
  SortCase(uint8_t d, const Shape& s) : dt(d), size(s) {}
  uint8_t dt;
  Shape size;                                // of the input; size[3] is the sorted length
  Shape in_st{}, v_st{}, i_st{};             // zero: contiguous
  int64_t flags = 0, first = 0, count = -1;  // count -1: the whole line
  uint32_t pes = 1;
  uint64_t ls = 128 * 1024;
  int64_t scratch_bytes = -1;  // -1: what the kernel needs
  bool introsort = false;      // kUnstable on a line that fits: the CPU's std::sort order
  // Edits the argument slots before the launch (bad sizes and strides).
  std::function<void(std::vector<Arg>&)> tweak;
};

struct SortRun {
  Tensor in, values, indices;
  LaunchResult result;
};

SortRun run_sort(Device& dev, const SortCase& c, std::mt19937& rng) {
  const int64_t count = c.count < 0 ? c.size[3] - c.first : c.count;
  const Shape osize{c.size[0], c.size[1], c.size[2], count};
  auto st = [](const Shape& s, const Shape& want) {
    return want == Shape{} ? contiguous(s) : want;
  };
  SortRun r;
  r.in = make_tensor(dev, c.dt, c.size, st(c.size, c.in_st));
  fill_sort_values(r.in, rng);
  r.in.upload(dev);
  r.values = make_tensor(dev, c.dt, osize, st(osize, c.v_st));
  r.indices = make_tensor(dev, kI64, osize, st(osize, c.i_st));
  const int64_t need = int64_t(c.pes) * c.size[3] * 32;
  const int64_t sb = c.scratch_bytes < 0 ? need : c.scratch_bytes;
  const uint64_t scratch = sb > 0 ? dev.alloc(uint64_t(sb)) : 0;
  std::vector<Arg> args{ptr(r.values.addr), ptr(r.indices.addr), ptr(r.in.addr),
                        ptr(scratch),       dtype(c.dt),         i64(c.flags),
                        i64(c.first),       i64(count),          i64(sb)};
  for (const auto& v :
       {r.in.size_args(), r.in.stride_args(), r.values.stride_args(), r.indices.stride_args()}) {
    args.insert(args.end(), v.begin(), v.end());
  }
  if (c.tweak) c.tweak(args);
  r.result = dev.launch(lib(), "sort", args, grid(c.pes, c.ls));
  return r;
}

// Every output element against the reference (bits of values, indices), gaps untouched.
void check_sort(Device& dev, SortRun& r, const SortCase& c) {
  r.values.download(dev);
  r.indices.download(dev);
  const int64_t len = c.size[3];
  const int64_t count = r.values.size[3];
  for (int64_t a = 0; a < c.size[0]; ++a) {
    for (int64_t b = 0; b < c.size[1]; ++b) {
      for (int64_t d = 0; d < c.size[2]; ++d) {
        std::vector<double> v(static_cast<size_t>(len));
        for (int64_t j = 0; j < len; ++j) v[size_t(j)] = r.in.at({a, b, d, j});
        const auto order = ref_order(v, (c.flags & kDescending) != 0, c.introsort);
        int64_t nnan = 0, first_nan = -1;
        for (int64_t j = 0; j < len; ++j) {
          if (std::isnan(v[size_t(j)])) {
            if (nnan++ == 0) first_nan = j;
          }
        }
        for (int64_t p = 0; p < count; ++p) {
          int64_t want = order[size_t(c.first + p)];
          if ((c.flags & kNanWins) && nnan > 0) want = first_nan;
          if (c.flags & kNanSkip) {
            const int64_t valid = len - nnan;
            want = order[size_t(valid > 0 ? (valid - 1) / 2 : 0)];
          }
          const Shape o{a, b, d, p};
          int64_t got_idx;
          std::memcpy(&got_idx, r.indices.raw(o), 8);
          const uint64_t got_bits = bits_at(r.values, o),
                         want_bits = bits_at(r.in, {a, b, d, want});
          if (got_idx != want || got_bits != want_bits) {
            FAIL("line " << shape_str({a, b, d, 0}) << " rank " << c.first + p << " of " << len
                         << ": index " << got_idx << " bits " << got_bits << ", want index " << want
                         << " bits " << want_bits);
          }
        }
      }
    }
  }
  // Nothing outside the outputs' views was written.
  for (Tensor* t : {&r.values, &r.indices}) {
    std::vector<uint8_t> inside(t->host.size(), 0);
    const unsigned es = dt_size(t->dt);
    for_each(t->size, [&](const Shape& i) {
      for (unsigned k = 0; k < es; ++k) inside[size_t(t->offset(i)) * es + k] = 1;
    });
    for (size_t k = 0; k < inside.size(); ++k) {
      if (!inside[k] && t->host[k] != kGapByte) FAIL("a byte outside the output view was written");
    }
  }
}

void sort_and_check(const SortCase& c, std::mt19937& rng) {
  Device dev(32ull << 20);
  SortRun r = run_sort(dev, c, rng);
  INFO(dt_name(c.dt) << " " << shape_str(c.size) << " flags " << c.flags << " first " << c.first
                     << " pes " << c.pes << " ls " << c.ls);
  INFO(r.result.describe());
  REQUIRE(r.result.ok());
  check_sort(dev, r, c);
}

// The status every PE agrees on, with the outputs untouched.
void expect_status(const SortCase& c, int64_t status, std::mt19937& rng) {
  Device dev(32ull << 20);
  SortRun r = run_sort(dev, c, rng);
  INFO(r.result.describe());
  REQUIRE(r.result.status() == status);
  r.values.download(dev);
  r.indices.download(dev);
  for (const Tensor* t : {&r.values, &r.indices}) {
    REQUIRE(std::count(t->host.begin(), t->host.end(), kGapByte) == std::ssize(t->host));
  }
}

}  // namespace

TEST_CASE("sort: every dtype, both directions, stable with NaN, -0.0 and ties", "[kernels][sort]") {
  std::mt19937 rng(7);
  for (uint8_t dt : kAllDtypes) {
    for (int64_t desc : {int64_t(0), kDescending}) {
      for (uint32_t pes : {1u, 4u, 64u}) {
        SortCase c{dt, {2, 3, 5, 37}};
        c.flags = desc;
        c.pes = pes;
        sort_and_check(c, rng);
      }
    }
  }
}

TEST_CASE("sort: lengths 0..20 and single lines", "[kernels][sort]") {
  std::mt19937 rng(8);
  for (int64_t len = 1; len <= 20; ++len) {
    for (uint8_t dt : {kF32, kI64, kBF16}) {
      SortCase c{dt, {1, 1, 3, len}};
      c.flags = len % 2 ? kDescending : 0;
      c.pes = 4;
      sort_and_check(c, rng);
    }
  }
  SortCase empty{kF32, {1, 2, 3, 0}};
  sort_and_check(empty, rng);  // nothing to sort: ok
  SortCase no_lines{kF32, {1, 0, 3, 5}};
  sort_and_check(no_lines, rng);
}

TEST_CASE("sort: strided inputs and outputs", "[kernels][sort]") {
  std::mt19937 rng(9);
  for (uint8_t dt : kAllDtypes) {
    for (uint32_t pes : {1u, 4u}) {
      const Shape size{2, 3, 6, 11};
      SortCase c{dt, size};
      c.in_st = permuted(size, {3, 0, 2, 1}, 1);  // the sorted dim outermost, padded
      c.v_st = permuted(size, {1, 3, 0, 2}, 2);
      c.i_st = permuted(size, {2, 0, 1, 3}, 3);
      c.flags = pes == 1 ? kDescending : 0;
      c.pes = pes;
      sort_and_check(c, rng);
    }
  }
}

TEST_CASE("sort: rank windows (topk, kthvalue) and the median modes", "[kernels][sort]") {
  std::mt19937 rng(10);
  for (uint8_t dt : kAllDtypes) {
    for (uint32_t pes : {1u, 4u, 64u}) {
      SortCase topk{dt, {1, 4, 7, 23}};
      topk.flags = kDescending;
      topk.count = 5;
      topk.pes = pes;
      sort_and_check(topk, rng);
      SortCase kth{dt, {1, 4, 7, 23}};
      kth.first = 22;
      kth.count = 1;
      kth.pes = pes;
      sort_and_check(kth, rng);
      SortCase none{dt, {1, 4, 7, 23}};
      none.count = 0;
      sort_and_check(none, rng);
    }
  }
  for (uint8_t dt : {kF32, kF16, kBF16, kI32}) {
    for (int64_t len : {1, 2, 9, 24}) {
      SortCase med{dt, {2, 1, 9, len}};
      med.flags = kNanWins;
      med.first = (len - 1) / 2;
      med.count = 1;
      med.pes = 4;
      sort_and_check(med, rng);
      SortCase nanmed{dt, {2, 1, 9, len}};
      nanmed.flags = kNanSkip;
      nanmed.count = 1;
      nanmed.pes = 4;
      sort_and_check(nanmed, rng);
    }
  }
}

TEST_CASE("sort: long lines are merged through the DRAM scratch", "[kernels][sort]") {
  std::mt19937 rng(11);
  // 128 KiB of local store holds about 3800 records: these lines take 2 to 4 merge passes.
  for (uint8_t dt : {kF32, kI64, kF16, kBool}) {
    for (uint32_t pes : {1u, 4u}) {
      SortCase c{dt, {1, 1, 3, 9000}};
      c.flags = pes == 1 ? 0 : kDescending;
      c.in_st = {0, 0, 1, 3};  // the line strided, lines interleaved
      c.pes = pes;
      sort_and_check(c, rng);
    }
  }
  SortCase big{kI32, {1, 1, 2, 30000}};
  big.pes = 2;
  sort_and_check(big, rng);
  SortCase topk{kF32, {1, 1, 2, 12000}};  // the final pass stops after the window
  topk.flags = kDescending;
  topk.first = 0;
  topk.count = 7;
  topk.pes = 2;
  sort_and_check(topk, rng);
  SortCase kth{kBF16, {1, 1, 1, 8000}};
  kth.first = 4321;
  kth.count = 1;
  sort_and_check(kth, rng);
  SortCase med{kF32, {1, 1, 3, 5000}};
  med.flags = kNanWins;
  med.first = 2499;
  med.count = 1;
  med.pes = 3;
  sort_and_check(med, rng);
  SortCase nanmed{kF16, {1, 1, 2, 5000}};
  nanmed.flags = kNanSkip;
  nanmed.count = 1;
  sort_and_check(nanmed, rng);
  // The same lengths fit in mtia-v2's 384 KiB store.
  SortCase v2{kF32, {1, 1, 2, 9000}};
  v2.ls = 384 * 1024;
  v2.scratch_bytes = 0;
  sort_and_check(v2, rng);
}

TEST_CASE("sort: flag 8 orders ties as the CPU's std::sort does", "[kernels][sort]") {
  std::mt19937 rng(13);
  for (uint8_t dt : kAllDtypes) {
    for (int64_t len : {5, 16, 17, 40, 333, 3000}) {
      for (int64_t desc : {int64_t(0), kDescending}) {
        SortCase c{dt, {1, 1, len > 1000 ? 2 : 5, len}};
        c.flags = kUnstable | desc;
        c.introsort = true;
        c.pes = 4;
        sort_and_check(c, rng);
      }
    }
  }
  // Many equal values (few distinct ones) and sorted runs: deep partitions of equal keys.
  for (uint8_t dt : {kBool, kI8}) {
    SortCase c{dt, {1, 1, 3, 2500}};
    c.flags = kUnstable;
    c.introsort = true;
    sort_and_check(c, rng);
  }
  // A window of the unstable order (topk of sort(stable=False) is not an op, but it composes).
  SortCase w{kF16, {1, 2, 3, 200}};
  w.flags = kUnstable | kDescending;
  w.first = 10;
  w.count = 50;
  w.introsort = true;
  sort_and_check(w, rng);
  // A line longer than the local store is merged stably whatever the flag.
  SortCase lng{kF32, {1, 1, 1, 9000}};
  lng.flags = kUnstable;
  sort_and_check(lng, rng);
}

TEST_CASE("sort statuses: bad dtype, flags, shapes, scratch, argument block", "[kernels][sort]") {
  std::mt19937 rng(12);
  SortCase c{kF32, {1, 2, 3, 10}};
  c.pes = 4;
  for (int64_t flags : {16, 6, 3, 5, 10, 12, -1}) {
    SortCase b = c;
    b.flags = flags;
    if (flags == 5 || flags == 12) b.count = 1;
    expect_status(b, MTIA_KSTATUS_BAD_OP, rng);
  }
  {
    SortCase b = c;
    b.first = 4;
    b.count = 7;  // past the end
    expect_status(b, MTIA_KSTATUS_BAD_SHAPE, rng);
  }
  {
    SortCase b = c;
    b.flags = kNanSkip;
    b.count = 2;  // nanmedian writes one rank
    expect_status(b, MTIA_KSTATUS_BAD_SHAPE, rng);
    b.count = 1;
    b.first = 1;
    expect_status(b, MTIA_KSTATUS_BAD_SHAPE, rng);
  }
  for (size_t slot : {9u, 16u, 20u, 24u, 8u}) {  // size0, in/values/indices stride3, scratch
    SortCase b = c;
    b.tweak = [slot](std::vector<Arg>& a) { a[slot].bits = uint64_t(-1); };
    expect_status(b, MTIA_KSTATUS_BAD_SHAPE, rng);
  }
  {
    SortCase b = c;
    b.first = -1;
    b.count = 1;
    expect_status(b, MTIA_KSTATUS_BAD_SHAPE, rng);
  }
  {
    // A long line with too little scratch (or none) fails before any data moves.
    SortCase b{kF32, {1, 1, 4, 6000}};
    b.pes = 4;
    b.scratch_bytes = 4 * 6000 * 32 - 1;
    expect_status(b, kNoScratch, rng);
    b.scratch_bytes = 0;
    expect_status(b, kNoScratch, rng);
  }
  {
    // Bad dtype codes and a short argument block, through the raw program.
    Device dev;
    Tensor in = make_tensor(dev, kF32, {1, 1, 1, 4});
    for (uint8_t bad : {uint8_t(0), uint8_t(9)}) {
      std::vector<uint64_t> slots(25, 0);
      slots[0] = slots[1] = slots[2] = in.addr;
      slots[4] = bad;
      slots[8] = 0;
      for (int i = 9; i < 13; ++i) slots[size_t(i)] = 1;
      slots[12] = 4;
      slots[7] = 4;
      std::vector<uint8_t> block(slots.size() * 8);
      std::memcpy(block.data(), slots.data(), block.size());
      LaunchResult r = dev.run(lib().program("sort"), block, grid(2));
      REQUIRE(r.status() == MTIA_KSTATUS_BAD_DTYPE);
      block.resize(block.size() - 8);
      r = dev.run(lib().program("sort"), block, grid(2));
      REQUIRE(r.status() == MTIA_KSTATUS_BAD_ARG_BYTES);
    }
  }
}
