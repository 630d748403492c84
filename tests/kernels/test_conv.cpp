// im2col against a nested-loop reference: every dtype, padding (negative origins), cropping
// (positive origins), strides, positive and negative dilations, strided and channels-last
// inputs, a broadcast (stride 0) input, grids of 1, 4 and 64 PEs, empty shapes, and every error
// status. im2col only moves bits, so outputs are compared byte for byte.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.h"

using namespace kt;

namespace {

using A3 = std::array<int64_t, 3>;

struct Im2col {
  uint8_t dt = kF32;
  int64_t n = 1, c = 1;
  A3 in{1, 1, 1};               // D, H, W
  std::array<int64_t, 5> st{};  // N, C, D, H, W element strides; {} = contiguous
  A3 k{1, 1, 1}, out{1, 1, 1};  // kernel and output sizes
  A3 stride{1, 1, 1}, origin{0, 0, 0}, dil{1, 1, 1};

  int64_t rows() const { return c * k[0] * k[1] * k[2]; }
  int64_t cols() const { return n * out[0] * out[1] * out[2]; }
};

std::array<int64_t, 5> contiguous5(const Im2col& p) {
  return {p.c * p.in[0] * p.in[1] * p.in[2], p.in[0] * p.in[1] * p.in[2], p.in[1] * p.in[2],
          p.in[2], 1};
}
// Channels-last strides (C innermost).
std::array<int64_t, 5> channels_last5(const Im2col& p) {
  return {p.c * p.in[0] * p.in[1] * p.in[2], 1, p.in[1] * p.in[2] * p.c, p.in[2] * p.c, p.c};
}

// Elements the input's storage spans.
int64_t span(const Im2col& p) {
  const int64_t sizes[5] = {p.n, p.c, p.in[0], p.in[1], p.in[2]};
  int64_t s = 1;
  for (int i = 0; i < 5; ++i) {
    if (sizes[i] == 0) return 0;
    s += (sizes[i] - 1) * p.st[size_t(i)];
  }
  return s;
}

std::vector<Arg> im2col_args(uint64_t out, uint64_t in, const Im2col& p) {
  std::vector<Arg> a = {ptr(out), ptr(in), dtype(p.dt), i64(p.n), i64(p.c)};
  for (int64_t v : p.in) a.push_back(i64(v));
  for (int64_t v : p.st) a.push_back(i64(v));
  for (const A3* g : {&p.k, &p.out, &p.stride, &p.origin, &p.dil}) {
    for (int64_t v : *g) a.push_back(i64(v));
  }
  return a;
}

// The expected output bytes: element (row, column) is the input element the formula names, or
// zero outside the input.
std::vector<uint8_t> reference(const Im2col& p, const std::vector<uint8_t>& in) {
  const unsigned es = dt_size(p.dt);
  std::vector<uint8_t> out(size_t(p.rows() * p.cols()) * es, 0);
  size_t at = 0;
  for (int64_t ch = 0; ch < p.c; ++ch)
    for (int64_t kd = 0; kd < p.k[0]; ++kd)
      for (int64_t kh = 0; kh < p.k[1]; ++kh)
        for (int64_t kw = 0; kw < p.k[2]; ++kw)
          for (int64_t b = 0; b < p.n; ++b)
            for (int64_t od = 0; od < p.out[0]; ++od)
              for (int64_t oh = 0; oh < p.out[1]; ++oh)
                for (int64_t ow = 0; ow < p.out[2]; ++ow, at += es) {
                  const int64_t pos[3] = {od * p.stride[0] + p.origin[0] + kd * p.dil[0],
                                          oh * p.stride[1] + p.origin[1] + kh * p.dil[1],
                                          ow * p.stride[2] + p.origin[2] + kw * p.dil[2]};
                  bool inside = true;
                  int64_t off = b * p.st[0] + ch * p.st[1];
                  for (int i = 0; i < 3; ++i) {
                    inside = inside && pos[i] >= 0 && pos[i] < p.in[size_t(i)];
                    off += pos[i] * p.st[size_t(2 + i)];
                  }
                  if (inside) std::memcpy(&out[at], &in[size_t(off) * es], es);
                }
  return out;
}

// Runs im2col on random input bits and checks every output byte, and that the bytes after the
// output were not written.
void check_im2col(const Im2col& p, uint32_t pes, const std::string& what,
                  uint64_t ls = 128 * 1024) {
  INFO(what << " dtype " << dt_name(p.dt) << " on " << pes << " PEs");
  std::mt19937 rng(7);
  Device dev;
  const unsigned es = dt_size(p.dt);
  std::vector<uint8_t> in(size_t(std::max<int64_t>(span(p), 1)) * es);
  for (auto& b : in) b = uint8_t(rng() | 1);  // non-zero bytes: zeros come from the padding
  const uint64_t in_addr = dev.alloc(in.size());
  dev.write(in_addr, in.data(), in.size());
  const size_t out_bytes = size_t(p.rows() * p.cols()) * es, tail = 64;
  const uint64_t out_addr = dev.alloc(out_bytes + tail);
  auto r =
      dev.launch(Module::library(), "im2col", im2col_args(out_addr, in_addr, p), grid(pes, ls));
  INFO(r.describe());
  REQUIRE(r.ok());
  std::vector<uint8_t> got(out_bytes + tail);
  dev.read(out_addr, got.data(), got.size());
  const std::vector<uint8_t> want = reference(p, in);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < out_bytes; ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  INFO("first differing element " << first / es);
  CHECK(bad == 0);
  for (size_t i = out_bytes; i < got.size(); ++i) REQUIRE(got[i] == kGapByte);
}

}  // namespace

TEST_CASE("im2col gathers conv2d columns with padding, stride and dilation", "[kernels][conv]") {
  for (uint8_t dt : kAllDtypes) {
    for (uint32_t pes : {1u, 4u, 64u}) {
      Im2col p;
      p.dt = dt;
      p.n = 2;
      p.c = 3;
      p.in = {1, 9, 11};
      p.k = {1, 3, 2};
      p.stride = {1, 2, 1};
      p.dil = {1, 1, 2};
      p.origin = {0, -1, -2};  // padding 1 and 2
      // (9 + 2 - 3) / 2 + 1, 11 + 4 - 2 - 1 + 1
      p.out = {1, 5, 13};
      p.st = pes == 4 ? channels_last5(p) : contiguous5(p);
      check_im2col(p, pes, pes == 4 ? "conv2d channels-last" : "conv2d");
    }
  }
}

TEST_CASE("im2col handles 3-D boxes, negative dilation and cropping origins", "[kernels][conv]") {
  for (uint8_t dt : {kF32, kF16, kBF16}) {
    Im2col p;
    p.dt = dt;
    p.n = 3;
    p.c = 2;
    p.in = {4, 5, 6};
    p.k = {2, 3, 3};
    p.out = {5, 5, 7};
    // The input gradient's form: stride 1, origin = padding, the kernel walked backwards.
    p.origin = {1, 2, 3};
    p.dil = {-1, -2, -1};
    // A padded, permuted layout: W outermost in memory after N, gaps between rows.
    p.st = {2 * 6 * 5 * 4 * 2, 1, 2 * 5 * 3, 2 * 3, 2 * 5 * 4 * 3};
    for (uint32_t pes : {1u, 4u, 64u}) check_im2col(p, pes, "conv3d, negative dilation");

    // Positive origins crop; output positions past the input are all padding, and some rows
    // (kernel offsets) never touch the input at all.
    Im2col q = p;
    q.dil = {1, 1, 3};
    q.stride = {2, 1, 3};
    q.origin = {2, 3, -7};
    q.out = {3, 4, 6};
    q.st = contiguous5(q);
    check_im2col(q, 4, "cropping and whole-zero rows");
  }
}

TEST_CASE("im2col serves conv1d, a broadcast input and the smaller local store",
          "[kernels][conv]") {
  Im2col p;
  p.dt = kF32;
  p.n = 5;
  p.c = 4;
  p.in = {1, 1, 40};
  p.k = {1, 1, 5};
  p.out = {1, 1, 19};
  p.stride = {1, 1, 2};
  p.origin = {0, 0, -2};
  p.st = contiguous5(p);
  check_im2col(p, 64, "conv1d", 128 * 1024);
  check_im2col(p, 3, "conv1d v2 store", 384 * 1024);
  // Every batch reads the same storage (stride 0 along N): the DMA broadcasts.
  p.st[0] = 0;
  check_im2col(p, 4, "batch broadcast");
  // One row, many batches: the batch is split over the PEs.
  Im2col q = p;
  q.c = 1;
  q.k = {1, 1, 1};
  q.n = 37;
  q.st = contiguous5(q);
  check_im2col(q, 64, "one row, batch split");
}

TEST_CASE("im2col of empty shapes writes nothing", "[kernels][conv]") {
  Im2col p;
  p.n = 2;
  p.c = 3;
  p.in = {1, 4, 4};
  p.k = {1, 2, 2};
  p.out = {1, 3, 3};
  p.st = contiguous5(p);
  for (int which = 0; which < 4; ++which) {
    Im2col q = p;
    if (which == 0) q.n = 0;
    if (which == 1) q.c = 0;
    if (which == 2) q.k[1] = 0;
    if (which == 3) q.out[2] = 0;
    Device dev;
    const uint64_t out = dev.alloc(64), in = dev.alloc(256);
    auto r = dev.launch(Module::library(), "im2col", im2col_args(out, in, q), grid(4));
    INFO(r.describe());
    REQUIRE(r.ok());
    std::vector<uint8_t> got(64);
    dev.read(out, got.data(), got.size());
    for (uint8_t b : got) CHECK(b == kGapByte);
  }
  // An empty input with a non-empty output is all padding.
  Im2col z = p;
  z.in = {1, 0, 4};
  z.st = contiguous5(z);
  check_im2col(z, 4, "empty input, zero columns");
}

TEST_CASE("im2col rejects bad arguments before it moves data", "[kernels][conv]") {
  Im2col p;
  p.n = 2;
  p.c = 2;
  p.in = {1, 4, 4};
  p.k = {1, 2, 2};
  p.out = {1, 3, 3};
  p.st = contiguous5(p);
  Device dev;
  const uint64_t out = dev.alloc(1024), in = dev.alloc(1024);
  auto status = [&](const Im2col& q) {
    return dev.launch(Module::library(), "im2col", im2col_args(out, in, q), grid(4)).status();
  };
  Im2col q = p;
  q.dt = 0;
  CHECK(status(q) == MTIA_KSTATUS_BAD_DTYPE);
  q.dt = 99;
  CHECK(status(q) == MTIA_KSTATUS_BAD_DTYPE);
  q = p;
  q.n = -1;
  CHECK(status(q) == MTIA_KSTATUS_BAD_SHAPE);
  q = p;
  q.in[1] = -4;
  CHECK(status(q) == MTIA_KSTATUS_BAD_SHAPE);
  q = p;
  q.st[3] = -1;
  CHECK(status(q) == MTIA_KSTATUS_BAD_SHAPE);
  q = p;
  q.k[2] = -2;
  CHECK(status(q) == MTIA_KSTATUS_BAD_SHAPE);
  q = p;
  q.out[0] = -1;
  CHECK(status(q) == MTIA_KSTATUS_BAD_SHAPE);
  q = p;
  q.stride[1] = 0;
  CHECK(status(q) == MTIA_KSTATUS_BAD_SHAPE);
  q = p;
  q.origin[2] = int64_t(1) << 40;
  CHECK(status(q) == MTIA_KSTATUS_BAD_SHAPE);
  q = p;
  q.dil[0] = -(int64_t(1) << 40);
  CHECK(status(q) == MTIA_KSTATUS_BAD_SHAPE);
  // Each size fine, the product of the output too large.
  q = p;
  q.out = {1 << 30, 1 << 30, 1 << 30};
  CHECK(status(q) == MTIA_KSTATUS_BAD_SHAPE);
  // Nothing was written by the refused launches; the good one writes.
  std::vector<uint8_t> got(1024);
  dev.read(out, got.data(), got.size());
  for (uint8_t b : got) REQUIRE(b == kGapByte);
  CHECK(status(p) == MTIA_KSTATUS_OK);
  // A block of the wrong size.
  std::vector<uint8_t> block(27 * 8, 0);
  CHECK(dev.run(Module::library().program("im2col"), block, grid(2)).status() ==
        MTIA_KSTATUS_BAD_ARG_BYTES);
}
