// The indexing kernels of kernels/lib/index.c against nested-loop references: index_gather,
// index_put (assign and accumulate with duplicates, scale, skip), embedding_bag (sum, mean, max,
// per-sample weights, padding), gather_lines, scatter_lines, cumsum, tri and compact, on 1, 4
// and 64 PEs and both local-store sizes, with strided operands, and every error status: bad
// dtypes, ops and shapes, a short argument block, and an index out of range (status 16), which
// must leave memory outside the outputs untouched.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "check.h"

using namespace kt;

namespace {

constexpr int64_t kBadIndex = 16;  // index.c's own status

const Module& lib() {
  return Module::library();
}

// A flat device buffer of one dtype with a host mirror (values as doubles).
struct Buf {
  uint8_t dt;
  uint64_t addr;
  std::vector<double> v;
};
Buf make(Device& dev, uint8_t dt, std::vector<double> v) {
  Buf b{dt, dev.alloc(std::max<size_t>(v.size(), 1) * dt_size(dt)), std::move(v)};
  std::vector<uint8_t> bytes(b.v.size() * dt_size(dt));
  for (size_t i = 0; i < b.v.size(); ++i) store_elem(dt, bytes.data() + i * dt_size(dt), b.v[i]);
  dev.write(b.addr, bytes.data(), bytes.size());
  return b;
}
std::vector<double> read(Device& dev, const Buf& b) {
  std::vector<uint8_t> bytes(b.v.size() * dt_size(b.dt));
  dev.read(b.addr, bytes.data(), bytes.size());
  std::vector<double> r(b.v.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = load_elem(b.dt, bytes.data() + i * dt_size(b.dt));
  return r;
}
std::vector<double> randv(std::mt19937& rng, uint8_t dt, size_t n, int lo = -3, int hi = 3) {
  std::uniform_int_distribution<int> u(lo * 8, hi * 8);
  std::vector<double> v(n);
  for (auto& x : v) x = dt_float(dt) ? round_to(dt, u(rng) / 8.0) : double(u(rng) / 8);
  if (dt == kBool) {
    for (auto& x : v) x = x > 0;
  }
  return v;
}
// A bad index fails the launch: the PEs that met it exit with 16 (PEs without work exit 0).
bool bad_index(const LaunchResult& r) {
  bool seen = false;
  for (const PeResult& p : r.pes) {
    if (p.faulted || (p.exit_status != 0 && p.exit_status != kBadIndex)) return false;
    seen = seen || p.exit_status == kBadIndex;
  }
  return seen;
}
void expect_ok(const LaunchResult& r) {
  INFO(r.describe());
  REQUIRE(r.ok());
}
void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what << " at " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])));
  }
}
double tol(uint8_t dt) {
  return dt == kF32 ? 1e-6 : dt == kF16 ? 1e-3 : dt == kBF16 ? 8e-3 : 0;
}

// index_gather: out[p, box] = src[idx[p] * st + box], src [rows x cols] with strides.
LaunchResult gather(Device& dev, const Buf& out, const Buf& src, const Buf& idx, int64_t n,
                    int64_t rows, int64_t cols, int64_t rs, int64_t cs, uint32_t pes,
                    uint64_t ls = 128 * 1024, int64_t flags = 1) {
  return dev.launch(lib(), "index_gather",
                    {ptr(out.addr), ptr(src.addr), ptr(idx.addr), ptr(0),  ptr(0),     ptr(0),
                     dtype(src.dt), dtype(idx.dt), i64(1),        i64(n),  i64(flags), i64(rows),
                     i64(1),        i64(1),        i64(1),        i64(rs), i64(0),     i64(0),
                     i64(0),        i64(cols),     i64(1),        i64(1),  i64(cols),  i64(0),
                     i64(0),        i64(cs),       i64(0),        i64(0),  i64(1)},
                    grid(pes, ls));
}

}  // namespace

TEST_CASE("index_gather copies the selected rows, negative indices wrap", "[kernels][index]") {
  std::mt19937 rng(1);
  for (uint8_t dt : kAllDtypes) {
    for (uint8_t it : {kI32, kI64}) {
      for (uint32_t pes : {1u, 4u, 64u}) {
        Device dev;
        const int64_t rows = 37, cols = 13, n = 300;
        // src stored column-major: element (r, c) at c * rows + r
        Buf src = make(dev, dt, randv(rng, dt, size_t(rows * cols)));
        std::vector<double> iv(n);
        std::uniform_int_distribution<int> u(-rows, rows - 1);
        for (auto& x : iv) x = u(rng);
        Buf idx = make(dev, it, iv);
        Buf out = make(dev, dt, std::vector<double>(size_t(n * cols), 0));
        expect_ok(gather(dev, out, src, idx, n, rows, cols, 1, rows, pes));
        std::vector<double> want(out.v.size());
        for (int64_t p = 0; p < n; ++p) {
          const int64_t r =
              int64_t(iv[size_t(p)]) < 0 ? int64_t(iv[size_t(p)]) + rows : int64_t(iv[size_t(p)]);
          for (int64_t c = 0; c < cols; ++c)
            want[size_t(p * cols + c)] = src.v[size_t(c * rows + r)];
        }
        check_close(read(dev, out), want, 0, "index_gather " + dt_name(dt));
      }
    }
  }
}

TEST_CASE("index_gather: an index out of range fails with status 16 and writes nothing outside",
          "[kernels][index]") {
  Device dev;
  Buf src = make(dev, kF32, {1, 2, 3, 4, 5, 6});
  Buf idx = make(dev, kI64, {0, 3});  // 3 rows
  Buf out = make(dev, kF32, {9, 9, 9, 9, 9, 9});
  const LaunchResult r = gather(dev, out, src, idx, 2, 3, 2, 2, 1, 1);
  INFO(r.describe());
  CHECK(r.status() == kBadIndex);
  Buf neg = make(dev, kI64, {-4});
  CHECK(gather(dev, out, src, neg, 1, 3, 2, 2, 1, 1).status() == kBadIndex);
  CHECK(gather(dev, out, src, make(dev, kI64, {-1}), 1, 3, 2, 2, 1, 1, 128 * 1024, 0).status() ==
        kBadIndex);  // no wrap
  const auto got = read(dev, out);
  CHECK(got[4] == 9);
  CHECK(got[5] == 9);
  // other statuses
  CHECK(gather(dev, out, src, make(dev, kF32, {0}), 1, 3, 2, 2, 1, 1).status() ==
        MTIA_KSTATUS_BAD_DTYPE);
  CHECK(gather(dev, out, src, idx, -1, 3, 2, 2, 1, 1).status() == MTIA_KSTATUS_BAD_SHAPE);
  CHECK(gather(dev, out, src, idx, 1, 3, 2, 2, 1, 1, 128 * 1024, 4).status() ==
        MTIA_KSTATUS_BAD_OP);
  std::vector<uint8_t> block(8, 0);
  CHECK(dev.run(lib().program("index_gather"), block, grid(1)).status() ==
        MTIA_KSTATUS_BAD_ARG_BYTES);
}

namespace {
// index_put over dst [rows x cols] (row stride rs) from src [n x cols]: flags as index.c.
LaunchResult put(Device& dev, const Buf& dst, const Buf& src, const Buf& idx, const Buf* scale,
                 int64_t n, int64_t rows, int64_t cols, int64_t rs, int64_t flags, int64_t skip,
                 uint32_t pes, uint64_t ls = 128 * 1024) {
  return dev.launch(lib(), "index_put",
                    {ptr(dst.addr),
                     ptr(src.addr),
                     ptr(idx.addr),
                     ptr(0),
                     ptr(0),
                     ptr(0),
                     ptr(scale ? scale->addr : 0),
                     dtype(dst.dt),
                     dtype(idx.dt),
                     i64(1),
                     i64(n),
                     i64(flags),
                     i64(skip),
                     i64(rows),
                     i64(1),
                     i64(1),
                     i64(1),
                     i64(rs),
                     i64(0),
                     i64(0),
                     i64(0),
                     i64(cols),
                     i64(1),
                     i64(1),
                     i64(cols),
                     i64(0),
                     i64(0),
                     i64(1),
                     i64(0),
                     i64(0),
                     i64(1)},
                    grid(pes, ls));
}
}  // namespace

TEST_CASE("index_put accumulates duplicates in order, scales, skips, and assigns",
          "[kernels][index]") {
  std::mt19937 rng(2);
  for (uint8_t dt : {kF32, kF16, kBF16, kI32, kI64, kI8}) {
    for (uint32_t pes : {1u, 4u, 64u}) {
      for (uint64_t ls : {128u * 1024u, 384u * 1024u}) {
        Device dev;
        const int64_t rows = 23, cols = dt == kF32 ? 9000 : 37, rs = cols + 3, n = 70;
        Buf dst = make(dev, dt, randv(rng, dt, size_t(rows * rs)));
        Buf src = make(dev, dt, randv(rng, dt, size_t(n * cols)));
        std::vector<double> iv(n);
        std::uniform_int_distribution<int> u(0, 6);  // many duplicates
        for (auto& x : iv) x = u(rng) * 3 % rows;
        Buf idx = make(dev, kI64, iv);
        const bool fl = dt_float(dt);
        std::vector<double> sv(n);
        for (size_t i = 0; i < sv.size(); ++i) sv[i] = round_to(kF32, 0.25 * double(i % 5));
        Buf scale = make(dev, kF32, sv);
        const int64_t skip = 6;
        const int64_t flags = 2 | 8 | (fl ? 4 : 0);
        expect_ok(put(dev, dst, src, idx, fl ? &scale : nullptr, n, rows, cols, rs, flags, skip,
                      pes, ls));
        std::vector<double> want = dst.v;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            double acc = dst.v[size_t(r * rs + c)];
            bool touched = false;
            for (int64_t p = 0; p < n; ++p) {
              if (int64_t(iv[size_t(p)]) != r || r == skip) continue;
              touched = true;
              const double s = src.v[size_t(p * cols + c)];
              acc = fl ? acc + s * sv[size_t(p)] : double(wrap(dt, int64_t(acc) + int64_t(s)));
            }
            if (touched) want[size_t(r * rs + c)] = fl ? round_to(dt, acc) : acc;
          }
        }
        check_close(read(dev, dst), want, tol(dt) * 4, "index_put accumulate " + dt_name(dt));
      }
    }
  }
  // assign: the last duplicate wins, as in a sequential loop
  for (uint32_t pes : {1u, 4u}) {
    Device dev;
    Buf dst = make(dev, kF32, std::vector<double>(8, -1));
    Buf src = make(dev, kF32, {1, 2, 3, 4, 5, 6, 7, 8});
    Buf idx = make(dev, kI32, {1, 3, 1, -1});
    expect_ok(put(dev, dst, src, idx, nullptr, 4, 4, 2, 2, 1, 0, pes));
    check_close(read(dev, dst), {-1, -1, 5, 6, -1, -1, 7, 8}, 0, "index_put assign");
  }
}

TEST_CASE("index_put statuses", "[kernels][index]") {
  Device dev;
  Buf dst = make(dev, kF32, {0, 0, 0, 0});
  Buf src = make(dev, kF32, {1, 2});
  Buf bad = make(dev, kI64, {1, 2});
  CHECK(bad_index(put(dev, dst, src, bad, nullptr, 2, 2, 1, 1, 2, 0, 4)));
  CHECK(read(dev, dst) == std::vector<double>{0, 0, 0, 0});
  Buf b = make(dev, kBool, {1, 0});
  CHECK(put(dev, b, b, make(dev, kI64, {0}), nullptr, 1, 2, 1, 1, 2, 0, 1).status() ==
        MTIA_KSTATUS_BAD_DTYPE);  // accumulating bool
  Buf i32 = make(dev, kI32, {0, 0});
  CHECK(put(dev, i32, i32, make(dev, kI64, {0}), &src, 1, 2, 1, 1, 2 | 4, 0, 1).status() ==
        MTIA_KSTATUS_BAD_DTYPE);  // a scale on integers
  CHECK(put(dev, dst, src, bad, nullptr, 1, 2, 1, 1, 16, 0, 1).status() == MTIA_KSTATUS_BAD_OP);
  CHECK(put(dev, dst, src, bad, nullptr, 1, -2, 1, 1, 2, 0, 1).status() == MTIA_KSTATUS_BAD_SHAPE);
}

namespace {
LaunchResult bag(Device& dev, const Buf& out, const Buf& w, const Buf& idx, const Buf& offs,
                 const Buf* psw, const Buf& o2b, const Buf& bs, const Buf& mi, int64_t mode,
                 int64_t flags, int64_t nw, int64_t dim, int64_t pad, uint32_t pes) {
  return dev.launch(lib(), "embedding_bag",
                    {ptr(out.addr),
                     ptr(w.addr),
                     ptr(idx.addr),
                     ptr(offs.addr),
                     ptr(psw ? psw->addr : 0),
                     ptr(o2b.addr),
                     ptr(bs.addr),
                     ptr(mi.addr),
                     dtype(w.dt),
                     dtype(idx.dt),
                     i64(mode),
                     i64(flags),
                     i64(int64_t(offs.v.size())),
                     i64(int64_t(idx.v.size())),
                     i64(nw),
                     i64(dim),
                     i64(dim),
                     i64(1),
                     i64(dim),
                     i64(pad)},
                    grid(pes));
}
}  // namespace

TEST_CASE("embedding_bag sums, averages and maxes bags, with weights and padding",
          "[kernels][index]") {
  std::mt19937 rng(3);
  const int64_t nw = 11, dim = 6;
  const std::vector<double> iv{1, 2, 4, 5, 4, 3, 2, 9, 10, 0, 2, 2};
  const std::vector<double> ov{0, 4, 4, 8, 10};  // bag 1 empty, bag 4 all padding
  const int64_t pad = 2;
  for (uint8_t dt : kFloatDtypes) {
    for (int64_t mode : {0, 1, 2}) {
      for (uint32_t pes : {1u, 4u}) {
        Device dev;
        Buf w = make(dev, dt, randv(rng, dt, size_t(nw * dim)));
        Buf idx = make(dev, kI64, iv), offs = make(dev, kI64, ov);
        Buf psw = make(dev, dt, randv(rng, dt, iv.size()));
        const size_t nb = ov.size();
        Buf out = make(dev, dt, std::vector<double>(nb * dim, 7));
        Buf o2b = make(dev, kI64, std::vector<double>(iv.size(), -5));
        Buf bs = make(dev, kI64, std::vector<double>(nb, -5));
        Buf mi = make(dev, kI64, std::vector<double>(nb * dim, -5));
        const bool weighted = mode == 0;
        expect_ok(bag(dev, out, w, idx, offs, weighted ? &psw : nullptr, o2b, bs, mi, mode,
                      weighted ? 1 : 0, nw, dim, pad, pes));
        std::vector<double> want(nb * dim), want_bs(nb), want_o2b(iv.size()), want_mi(nb * dim);
        for (size_t b = 0; b < nb; ++b) {
          const size_t s = size_t(ov[b]), e = b + 1 < nb ? size_t(ov[b + 1]) : iv.size();
          int cnt = 0;
          for (size_t i = s; i < e; ++i) want_o2b[i] = double(b);
          for (int64_t c = 0; c < dim; ++c) {
            double acc = mode == 2 ? -1e30 : 0, arg = 0;
            cnt = 0;
            for (size_t i = s; i < e; ++i) {
              if (iv[i] == pad) continue;
              ++cnt;
              double x = w.v[size_t(iv[i]) * dim + size_t(c)];
              if (weighted) x *= psw.v[i];
              if (mode == 2) {
                if (x > acc) {
                  acc = x;
                  arg = iv[i];
                }
              } else {
                acc += x;
              }
            }
            if (cnt == 0) acc = 0;
            if (mode == 1 && cnt > 0) acc /= cnt;
            want[b * dim + size_t(c)] = round_to(dt, acc);
            want_mi[b * dim + size_t(c)] = arg;
          }
          want_bs[b] = cnt;
        }
        const std::string what = "embedding_bag " + dt_name(dt) + " mode " + std::to_string(mode);
        check_close(read(dev, out), want, tol(dt) * 4, what);
        check_close(read(dev, bs), want_bs, 0, what + " bag_size");
        check_close(read(dev, o2b), want_o2b, 0, what + " offset2bag");
        if (mode == 2) check_close(read(dev, mi), want_mi, 0, what + " max_indices");
      }
    }
  }
  Device dev;
  Buf w = make(dev, kF32, std::vector<double>(4, 1));
  Buf out = make(dev, kF32, {0, 0}), z = make(dev, kI64, {0, 0});
  CHECK(bag(dev, out, w, make(dev, kI64, {0, 2}), make(dev, kI64, {0}), nullptr, z, z, z, 0, 0, 2,
            2, -1, 1)
            .status() == kBadIndex);
  CHECK(bag(dev, out, w, make(dev, kI64, {0, 1}), make(dev, kI64, {1, 0}), nullptr, z, z, z, 0, 0,
            2, 2, -1, 1)
            .status() == kBadIndex);  // offsets going backwards
  CHECK(bag(dev, out, w, z, z, nullptr, z, z, z, 1, 1, 2, 2, -1, 1).status() ==
        MTIA_KSTATUS_BAD_OP);  // weights with mean
  CHECK(bag(dev, z, z, z, z, nullptr, z, z, z, 0, 0, 2, 2, -1, 1).status() ==
        MTIA_KSTATUS_BAD_DTYPE);
}

TEST_CASE("gather_lines and scatter_lines along the last dim of 4-D views", "[kernels][index]") {
  std::mt19937 rng(4);
  for (uint8_t dt : {kF32, kF16, kBF16, kI32, kI8}) {
    for (uint32_t pes : {1u, 4u, 64u}) {
      Device dev;
      const Shape is{2, 3, 4, 5};  // index sizes
      const int64_t L = 7;         // source / destination line length
      // src/dst [2, 3, 4, L] stored with the line dim outermost (strided lines)
      const Shape ds{3 * 4 * 1, 4, 1, 2 * 3 * 4};
      const int64_t dn = 2 * 3 * 4 * L;
      Buf src = make(dev, dt, randv(rng, dt, size_t(dn)));
      std::vector<double> iv(2 * 3 * 4 * 5);
      std::uniform_int_distribution<int> u(0, int(L) - 1);
      for (auto& x : iv) x = u(rng);
      Buf idx = make(dev, kI64, iv);
      Buf out = make(dev, dt, std::vector<double>(iv.size(), 0));
      auto args = [&](std::vector<Arg> a) {
        for (int64_t s : is) a.push_back(i64(s));
        return a;
      };
      std::vector<Arg> g =
          args({ptr(out.addr), ptr(src.addr), ptr(idx.addr), dtype(dt), dtype(kI64)});
      g.push_back(i64(L));
      for (int64_t s : {60, 20, 5, 1}) g.push_back(i64(s));  // out contiguous
      for (int64_t s : ds) g.push_back(i64(s));
      for (int64_t s : {60, 20, 5, 1}) g.push_back(i64(s));
      expect_ok(dev.launch(lib(), "gather_lines", g, grid(pes)));
      std::vector<double> want(iv.size());
      for (int64_t a = 0; a < 2; ++a) {
        for (int64_t b = 0; b < 3; ++b) {
          for (int64_t c = 0; c < 4; ++c) {
            for (int64_t j = 0; j < 5; ++j) {
              const size_t p = size_t(a * 60 + b * 20 + c * 5 + j);
              const int64_t v = int64_t(iv[p]);
              const size_t s = size_t(a * ds[0] + b * ds[1] + c * ds[2] + v * ds[3]);
              want[p] = src.v[s];
            }
          }
        }
      }
      check_close(read(dev, out), want, 0, "gather_lines " + dt_name(dt));
      // scatter_add of `out` back into src, then a plain scatter of a value
      for (int64_t mode : {1, 0}) {
        Buf dst = make(dev, dt, src.v);
        std::vector<Arg> s =
            args({ptr(dst.addr), ptr(out.addr), ptr(idx.addr), dtype(dt), dtype(kI64), i64(mode),
                  i64(mode == 0 ? 1 : 0), i64(int64_t(bits_of(dt, 2)))});
        s.push_back(i64(L));
        for (int64_t x : ds) s.push_back(i64(x));
        for (int64_t x : {60, 20, 5, 1}) s.push_back(i64(x));
        for (int64_t x : {60, 20, 5, 1}) s.push_back(i64(x));
        expect_ok(dev.launch(lib(), "scatter_lines", s, grid(pes)));
        std::vector<double> w2 = src.v;
        for (int64_t a = 0; a < 2; ++a) {
          for (int64_t b = 0; b < 3; ++b) {
            for (int64_t c = 0; c < 4; ++c) {
              for (int64_t j = 0; j < 5; ++j) {
                const size_t p = size_t(a * 60 + b * 20 + c * 5 + j);
                const size_t t = size_t(a * ds[0] + b * ds[1] + c * ds[2] + int64_t(iv[p]) * ds[3]);
                w2[t] = mode == 0      ? 2
                        : dt_float(dt) ? w2[t] + want[p]
                                       : double(wrap(dt, int64_t(w2[t]) + int64_t(want[p])));
              }
            }
          }
        }
        for (auto& x : w2) x = dt_float(dt) ? round_to(dt, x) : x;
        check_close(read(dev, dst), w2, tol(dt) * 4,
                    "scatter_lines mode " + std::to_string(mode) + " " + dt_name(dt));
      }
    }
  }
  Device dev;
  Buf x = make(dev, kF32, {1, 2, 3}), bad = make(dev, kI64, {3});
  std::vector<Arg> g{ptr(x.addr), ptr(x.addr), ptr(bad.addr), dtype(kF32), dtype(kI64),
                     i64(1),      i64(1),      i64(1),        i64(1),      i64(3)};
  for (int k = 0; k < 12; ++k) g.push_back(i64(1));
  CHECK(dev.launch(lib(), "gather_lines", g, grid(1)).status() == kBadIndex);
  g[4] = dtype(kF32);
  CHECK(dev.launch(lib(), "gather_lines", g, grid(1)).status() == MTIA_KSTATUS_BAD_DTYPE);
}

TEST_CASE("cumsum along the middle of [outer, len, inner], any layout", "[kernels][index]") {
  std::mt19937 rng(5);
  struct Case {
    uint8_t in, out;
  };
  for (Case cs : {Case{kF32, kF32}, Case{kF16, kF16}, Case{kBF16, kF32}, Case{kI32, kI64},
                  Case{kBool, kI64}, Case{kI8, kF32}}) {
    for (int64_t inner : {1, 5, 2000}) {
      for (uint32_t pes : {1u, 4u}) {
        Device dev;
        const int64_t outer = 3, len = inner == 2000 ? 40 : 300;
        const int64_t n = outer * len * inner;
        std::vector<double> iv = randv(rng, cs.in, size_t(n));
        if (cs.in == kBool) {
          for (auto& x : iv) x = x > 0;
        }
        Buf in = make(dev, cs.in, iv);
        Buf out = make(dev, cs.out, std::vector<double>(size_t(n), 0));
        // in transposed: [outer, len, inner] stored as [len, outer, inner]
        const int64_t ist[3] = {inner, outer * inner, 1}, ost[3] = {len * inner, inner, 1};
        expect_ok(dev.launch(lib(), "cumsum",
                             {ptr(out.addr), ptr(in.addr), dtype(cs.in), dtype(cs.out), i64(outer),
                              i64(len), i64(inner), i64(ist[0]), i64(ist[1]), i64(ist[2]),
                              i64(ost[0]), i64(ost[1]), i64(ost[2])},
                             grid(pes)));
        std::vector<double> want(static_cast<size_t>(n));
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t c = 0; c < inner; ++c) {
            double s = 0;
            for (int64_t t = 0; t < len; ++t) {
              s += iv[size_t(o * ist[0] + t * ist[1] + c * ist[2])];
              if (dt_float(cs.out)) s = round_to(kF32, s);
              want[size_t(o * ost[0] + t * ost[1] + c)] = round_to(cs.out, s);
            }
          }
        }
        check_close(read(dev, out), want, tol(cs.out) * 2,
                    "cumsum " + dt_name(cs.in) + " -> " + dt_name(cs.out));
      }
    }
  }
  Device dev;
  Buf x = make(dev, kF32, {1});
  CHECK(dev.launch(lib(), "cumsum",
                   {ptr(x.addr), ptr(x.addr), dtype(kF32), dtype(kBool), i64(1), i64(1), i64(1),
                    i64(1), i64(1), i64(1), i64(1), i64(1), i64(1)},
                   grid(1))
            .status() == MTIA_KSTATUS_BAD_DTYPE);
  CHECK(dev.launch(lib(), "cumsum",
                   {ptr(x.addr), ptr(x.addr), dtype(kF32), dtype(kF32), i64(1), i64(-1), i64(1),
                    i64(1), i64(1), i64(1), i64(1), i64(1), i64(1)},
                   grid(1))
            .status() == MTIA_KSTATUS_BAD_SHAPE);
}

TEST_CASE("tri keeps one triangle and zeroes the rest, also in place", "[kernels][index]") {
  std::mt19937 rng(6);
  for (uint8_t dt : kAllDtypes) {
    for (int64_t lower : {0, 1}) {
      for (int64_t k : {-3, 0, 2, 20}) {
        Device dev;
        const int64_t B = 2, R = 9, C = 7;
        Buf in = make(dev, dt, randv(rng, dt, size_t(B * R * C)));
        Buf out = make(dev, dt, std::vector<double>(size_t(B * R * C), 1));
        // in transposed within each matrix: (r, c) at c * R + r
        auto run = [&](const Buf& o, const Buf& i, const int64_t* ist) {
          return dev.launch(
              lib(), "tri",
              {ptr(o.addr), ptr(i.addr), dtype(dt), i64(lower), i64(k), i64(B), i64(R), i64(C),
               i64(ist[0]), i64(ist[1]), i64(ist[2]), i64(R * C), i64(C), i64(1)},
              grid(4));
        };
        const int64_t tst[3] = {R * C, 1, R}, cst[3] = {R * C, C, 1};
        expect_ok(run(out, in, tst));
        std::vector<double> want(static_cast<size_t>(B * R * C)), want_ip(want.size());
        for (int64_t b = 0; b < B; ++b) {
          for (int64_t r = 0; r < R; ++r) {
            for (int64_t c = 0; c < C; ++c) {
              const bool keep = lower ? c - r <= k : c - r >= k;
              want[size_t(b * R * C + r * C + c)] = keep ? in.v[size_t(b * R * C + c * R + r)] : 0;
              want_ip[size_t(b * R * C + r * C + c)] =
                  keep ? in.v[size_t(b * R * C + r * C + c)] : 0;
            }
          }
        }
        check_close(read(dev, out), want, 0, "tri " + dt_name(dt));
        expect_ok(run(in, in, cst));  // in place
        check_close(read(dev, in), want_ip, 0, "tri in place " + dt_name(dt));
      }
    }
  }
}

TEST_CASE("compact selects values and coordinates in row-major order", "[kernels][index]") {
  std::mt19937 rng(7);
  for (uint8_t dt : {kF32, kF16, kI8, kI64}) {
    for (uint32_t pes : {1u, 4u, 64u}) {
      Device dev;
      const Shape sz{2, 3, 5, 6000};
      const int64_t n = 2 * 3 * 5 * 6000, rows = 30;
      Buf src = make(dev, dt, randv(rng, dt, size_t(n)));
      std::vector<double> mv(static_cast<size_t>(n));
      std::bernoulli_distribution bern(0.3);
      for (auto& x : mv) x = bern(rng);
      Buf mask = make(dev, kBool, mv);
      std::vector<double> starts(static_cast<size_t>(rows));
      double total = 0;
      for (int64_t r = 0; r < rows; ++r) {
        starts[size_t(r)] = total;
        for (int64_t j = 0; j < sz[3]; ++j) total += mv[size_t(r * sz[3] + j)];
      }
      Buf st = make(dev, kI64, starts);
      for (int64_t mode : {0, 1}) {
        Buf out =
            make(dev, mode ? kI64 : dt, std::vector<double>(size_t(total) * (mode ? 3 : 1), -7));
        std::vector<Arg> a{ptr(out.addr), ptr(src.addr), ptr(mask.addr), ptr(st.addr),
                           dtype(dt),     i64(mode),     i64(3)};
        for (int64_t s : sz) a.push_back(i64(s));
        for (int k = 0; k < 2; ++k) {
          for (int64_t s : contiguous(sz)) a.push_back(i64(s));
        }
        expect_ok(dev.launch(lib(), "compact", a, grid(pes)));
        std::vector<double> want;
        for (int64_t i = 0; i < n; ++i) {
          if (mv[size_t(i)] == 0) continue;
          if (mode == 0) {
            want.push_back(src.v[size_t(i)]);
          } else {
            want.push_back(double((i / sz[3]) / 5 % 3));
            want.push_back(double((i / sz[3]) % 5));
            want.push_back(double(i % sz[3]));
          }
        }
        check_close(read(dev, out), want, 0, "compact mode " + std::to_string(mode));
      }
    }
  }
}
