// Layout lowering without a device: merging, dropping, splitting, validation, overflow.
#include <catch2/catch.hpp>

#include <climits>
#include <optional>

#include "mtia/copy_plan.h"
#include "mtia/error.h"
#include "reference.h"

using mtia::CopyPlan;
using mtia::Error;
using mtia::ErrorKind;
using mtia::Layout;
using mtia::plan_copy;
using mtia::plan_fill;

namespace {

Layout strided(std::vector<int64_t> sizes, std::vector<int64_t> strides, size_t elem,
               int64_t offset = 0) {
  Layout l;
  l.sizes = std::move(sizes);
  l.strides = std::move(strides);
  l.elem_size = elem;
  l.offset = offset;
  return l;
}

// Expects plan_copy(dst, src) to throw kInvalidArgument with `text` in the message.
void expect_invalid(const Layout& dst, const Layout& src, const std::string& text) {
  try {
    plan_copy(dst, src);
    FAIL("expected an error containing '" << text << "'");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidArgument);
    CHECK_THAT(e.what(), Catch::Contains(text));
  }
}

}  // namespace

TEST_CASE("contiguous copies merge into one dimension", "[copy_plan]") {
  const Layout l = Layout::contiguous({2, 3, 4}, 4);
  CHECK(l.strides == std::vector<int64_t>{12, 4, 1});
  const CopyPlan p = plan_copy(l, l);
  CHECK(p.elements == 24);
  REQUIRE(p.pieces.size() == 1);
  CHECK(p.pieces[0].ndims == 1);
  CHECK(p.pieces[0].sizes[0] == 24);
  CHECK(p.pieces[0].src_strides[0] == 4);
  CHECK(p.pieces[0].dst_strides[0] == 4);
  CHECK(p.src_span.lo == 0);
  CHECK(p.src_span.hi == 96);
}

TEST_CASE("size-1 dimensions are dropped, whatever their stride", "[copy_plan]") {
  const Layout dst = strided({1, 4, 1, 3}, {999, 3, 0, 1}, 2);
  const Layout src = strided({1, 4, 1, 3}, {5, 3, 77, 1}, 2);
  const CopyPlan p = plan_copy(dst, src);
  REQUIRE(p.pieces.size() == 1);
  CHECK(p.pieces[0].ndims == 1);
  CHECK(p.pieces[0].sizes[0] == 12);
  CHECK(p.dst_span.hi == 24);
}

TEST_CASE("a transposed source keeps two dimensions", "[copy_plan]") {
  // dst [3][5] row-major; src is a [5][3] row-major matrix viewed transposed.
  const Layout dst = Layout::contiguous({3, 5}, 4);
  const Layout src = strided({3, 5}, {1, 3}, 4);
  const CopyPlan p = plan_copy(dst, src);
  REQUIRE(p.pieces.size() == 1);
  const auto& pc = p.pieces[0];
  REQUIRE(pc.ndims == 2);
  CHECK(pc.sizes[0] == 3);
  CHECK(pc.sizes[1] == 5);
  CHECK(pc.dst_strides[0] == 20);  // 5 elements x 4 bytes
  CHECK(pc.dst_strides[1] == 4);
  CHECK(pc.src_strides[0] == 4);
  CHECK(pc.src_strides[1] == 12);  // 3 elements x 4 bytes
}

TEST_CASE("the loop order follows the chosen side", "[copy_plan]") {
  // The same transpose walked along the source: its rows become the inner loop.
  const Layout dst = Layout::contiguous({3, 5}, 4);
  const Layout src = strided({3, 5}, {1, 3}, 4);
  const CopyPlan p = plan_copy(dst, src, mtia::LoopOrder::kSourceContiguous);
  REQUIRE(p.pieces.size() == 1);
  const auto& pc = p.pieces[0];
  REQUIRE(pc.ndims == 2);
  CHECK(pc.sizes[0] == 5);
  CHECK(pc.sizes[1] == 3);
  CHECK(pc.src_strides[0] == 12);
  CHECK(pc.src_strides[1] == 4);
  CHECK(pc.dst_strides[0] == 4);
  CHECK(pc.dst_strides[1] == 20);
}

TEST_CASE("dimensions merge only where both sides are contiguous", "[copy_plan]") {
  // src rows are padded to 5 elements: the rows cannot merge; dst is fully contiguous.
  const Layout dst = Layout::contiguous({2, 4, 3}, 8);
  const Layout src = strided({2, 4, 3}, {20, 5, 1}, 8, 2);
  const CopyPlan p = plan_copy(dst, src);
  REQUIRE(p.pieces.size() == 1);
  const auto& pc = p.pieces[0];
  // [2][4] merge on the source too (20 == 5 * 4), [4][3] do not (5 != 3).
  REQUIRE(pc.ndims == 2);
  CHECK(pc.sizes[0] == 8);
  CHECK(pc.sizes[1] == 3);
  CHECK(pc.src_strides[0] == 40);
  CHECK(pc.src_strides[1] == 8);
  CHECK(pc.dst_strides[0] == 24);
  CHECK(pc.src_offset == 16);  // offset 2 elements x 8 bytes
  CHECK(p.src_span.lo == 16);
  CHECK(p.src_span.hi == (2 + 20 + 15 + 2 + 1) * 8);
}

TEST_CASE("equally permuted layouts merge after reordering", "[copy_plan]") {
  // Column-major on both sides: contiguous in memory, just not in index order.
  const Layout l = strided({3, 4}, {1, 3}, 4);
  const CopyPlan p = plan_copy(l, l);
  REQUIRE(p.pieces.size() == 1);
  CHECK(p.pieces[0].ndims == 1);
  CHECK(p.pieces[0].sizes[0] == 12);
}

TEST_CASE("more than six dimensions split into several descriptors", "[copy_plan]") {
  // Eight dimensions that cannot merge: the source pads every dimension by one element.
  const std::vector<int64_t> sizes = {2, 3, 2, 3, 2, 3, 2, 3};
  const Layout dst = Layout::contiguous(sizes, 4);
  Layout src = dst;
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    src.strides[d] = stride;
    stride = stride * sizes[d] + 1;
  }
  const CopyPlan p = plan_copy(dst, src);
  // Kept: the innermost (size 3) and the five largest others: the three other 3s and two of
  // the 2s (the inner ones, 6 and 4). Looped: dimensions 0 and 2, 2 x 2 = 4 descriptors.
  REQUIRE(p.pieces.size() == 4);
  for (const auto& pc : p.pieces) {
    REQUIRE(pc.ndims == 6);
    CHECK(pc.sizes[0] == 3);  // dimension 1
    CHECK(pc.sizes[5] == 3);  // dimension 7
  }
  // Descriptor offsets step through dimensions 0 and 2, dimension 2 fastest.
  const uint64_t d0 = static_cast<uint64_t>(dst.strides[0]) * 4;
  const uint64_t d2 = static_cast<uint64_t>(dst.strides[2]) * 4;
  CHECK(p.pieces[0].dst_offset == 0);
  CHECK(p.pieces[1].dst_offset == d2);
  CHECK(p.pieces[2].dst_offset == d0);
  CHECK(p.pieces[3].dst_offset == d0 + d2);
  CHECK(p.pieces[3].src_offset == static_cast<uint64_t>(src.strides[0] + src.strides[2]) * 4);

  // Together they copy exactly what the nested loops copy.
  std::mt19937_64 rng(7);
  const auto in = mtia::test::random_bytes(rng, mtia::test::span_end(src));
  std::vector<uint8_t> got(mtia::test::span_end(dst), 0), want(got.size(), 0);
  mtia::test::execute_plan(p, got.data(), in.data());
  mtia::test::reference_copy(want.data(), dst, in.data(), src);
  CHECK(got == want);
}

TEST_CASE("random layouts: plans reproduce the nested-loop copy", "[copy_plan]") {
  std::mt19937_64 rng(20240901);
  for (int i = 0; i < 3000; ++i) {
    const size_t elem = mtia::test::random_elem_size(rng);
    const auto sizes = mtia::test::random_shape(rng, 9, 2000);
    const Layout dst = mtia::test::random_layout(rng, sizes, elem);
    const Layout src = mtia::test::random_layout(rng, sizes, elem);
    INFO("case " << i << ": dst " << dst.to_string() << ", src " << src.to_string());
    const auto order =
        i % 2 ? mtia::LoopOrder::kSourceContiguous : mtia::LoopOrder::kDestinationContiguous;
    const CopyPlan p = plan_copy(dst, src, order);
    uint64_t moved = 0;
    for (const auto& pc : p.pieces) {
      REQUIRE(pc.ndims >= 1);
      REQUIRE(pc.ndims <= mtia::kMaxCopyDims);
      uint64_t n = 1;
      for (int k = 0; k < pc.ndims; ++k) n *= pc.sizes[k];
      moved += n;
    }
    REQUIRE(moved == p.elements);
    REQUIRE(p.src_span.hi == mtia::test::span_end(src));
    REQUIRE(p.dst_span.hi == mtia::test::span_end(dst));
    const auto in = mtia::test::random_bytes(rng, p.src_span.hi);
    std::vector<uint8_t> got(p.dst_span.hi, 0xEE), want(p.dst_span.hi, 0xEE);
    mtia::test::execute_plan(p, got.data(), in.data());
    mtia::test::reference_copy(want.data(), dst, in.data(), src);
    REQUIRE(got == want);
  }
}

TEST_CASE("fill plans cover exactly the layout's elements", "[copy_plan]") {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 500; ++i) {
    const size_t elem = mtia::test::random_elem_size(rng);
    const Layout l = mtia::test::random_layout(rng, mtia::test::random_shape(rng, 8, 1000), elem);
    const CopyPlan p = plan_fill(l);
    const uint64_t pattern = 0x0102030405060708ull & (elem == 8 ? ~0ull : (1ull << (8 * elem)) - 1);
    std::vector<uint8_t> got(p.dst_span.hi, 0), want(p.dst_span.hi, 0);
    // Executing a fill plan = copying from a source whose strides are all zero.
    mtia::CopyPlan as_copy = p;
    for (auto& pc : as_copy.pieces) pc.src_offset = 0;
    mtia::test::execute_plan(as_copy, got.data(), reinterpret_cast<const uint8_t*>(&pattern));
    mtia::test::reference_fill(want.data(), l, pattern);
    REQUIRE(got == want);
  }
}

TEST_CASE("zero-element and rank-0 layouts", "[copy_plan]") {
  const Layout empty = Layout::contiguous({4, 0, 3}, 4);
  const CopyPlan p = plan_copy(empty, empty);
  CHECK(p.elements == 0);
  CHECK(p.pieces.empty());

  const Layout scalar = Layout::contiguous({}, 8, 3);
  const CopyPlan s = plan_copy(scalar, scalar);
  CHECK(s.elements == 1);
  REQUIRE(s.pieces.size() == 1);
  CHECK(s.pieces[0].ndims == 1);
  CHECK(s.pieces[0].sizes[0] == 1);
  CHECK(s.pieces[0].src_offset == 24);
  CHECK(s.dst_span.hi == 32);
}

TEST_CASE("bad layouts are rejected with a reason", "[copy_plan]") {
  const Layout ok = Layout::contiguous({2, 3}, 4);
  expect_invalid(Layout::contiguous({2, 3}, 3), ok, "element size 3");
  expect_invalid(Layout::contiguous({2, 3}, 2), ok, "element sizes differ");
  expect_invalid(Layout::contiguous({3, 2}, 4), ok, "mismatched shapes");
  expect_invalid(Layout::contiguous({6}, 4), ok, "mismatched shapes");
  expect_invalid(strided({2, 3}, {3}, 4), strided({2, 3}, {3}, 4), "2 sizes but 1 strides");
  expect_invalid(strided({2, -3}, {3, 1}, 4), strided({2, -3}, {3, 1}, 4), "negative size");
  expect_invalid(ok, strided({2, 3}, {-3, 1}, 4), "negative stride");
  expect_invalid(ok, strided({2, 3}, {3, 1}, 4, -1), "negative offset");
  expect_invalid(strided({2, 3}, {0, 1}, 4), ok, "stride 0");
  // A zero stride on the source is a broadcast read, which is fine.
  CHECK_NOTHROW(plan_copy(ok, strided({2, 3}, {0, 1}, 4)));
}

TEST_CASE("overflowing sizes and strides are rejected", "[copy_plan]") {
  const int64_t big = int64_t{1} << 40;
  // (size - 1) x stride overflows.
  expect_invalid(strided({4}, {INT64_MAX}, 1), strided({4}, {1}, 1), "(size - 1) x stride");
  // The sum over dimensions overflows.
  expect_invalid(strided({2, 2, 2}, {INT64_MAX, INT64_MAX, INT64_MAX}, 1),
                 strided({2, 2, 2}, {4, 2, 1}, 1), "sum over dimensions up to 2");
  // Elements fit, bytes do not.
  expect_invalid(strided({2}, {INT64_MAX / 2}, 8), strided({2}, {1}, 8), "overflows");
  // The element count overflows (contiguous strides would overflow first, so use stride 0
  // on the source and huge strides on the destination).
  expect_invalid(strided({big, big, big}, {1, 1, 1}, 1), strided({big, big, big}, {0, 0, 0}, 1),
                 "overflow");
  // The offset alone pushes the last byte past 2^64.
  expect_invalid(strided({1}, {1}, 8, INT64_MAX), strided({1}, {1}, 8), "overflows");
}

TEST_CASE("hopelessly fragmented layouts are refused", "[copy_plan]") {
  // Twelve dimensions of size 4, nothing mergeable: 4^6 = 4096 descriptors is fine...
  std::vector<int64_t> sizes(12, 4);
  Layout dst = Layout::contiguous(sizes, 1);
  Layout src = dst;
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    src.strides[d] = stride;
    stride = stride * 4 + 1;
  }
  CHECK(plan_copy(dst, src).pieces.size() == 4096);
  // ...but seventeen need 4^11 descriptors, over the limit of 2^20.
  sizes.assign(17, 4);
  dst = Layout::contiguous(sizes, 1);
  src = dst;
  stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    src.strides[d] = stride;
    stride = stride * 4 + 1;
  }
  expect_invalid(dst, src, "DMA descriptors");
}

TEST_CASE("Layout arithmetic rejects what overflows 64 bits instead of wrapping", "[copy_plan]") {
  auto kind_of = [](auto&& fn) -> std::optional<ErrorKind> {
    try {
      fn();
    } catch (const mtia::Error& e) {
      return e.kind();
    }
    return std::nullopt;
  };
  // 2 x 2^62 x 4 elements: the outer stride 2^64 does not fit.
  CHECK(kind_of([] {
          mtia::Layout::contiguous({2, int64_t{1} << 62, 4}, 1);
        }) == ErrorKind::kInvalidArgument);
  CHECK(kind_of([] { mtia::Layout::contiguous({3, -1}, 4); }) == ErrorKind::kInvalidArgument);
  const mtia::Layout huge{{int64_t{1} << 40, int64_t{1} << 40}, {1, 1}, 0, 1};
  CHECK(kind_of([&] { (void)huge.numel(); }) == ErrorKind::kInvalidArgument);
  const mtia::Layout negative{{4, -2}, {1, 1}, 0, 1};
  CHECK(kind_of([&] { (void)negative.numel(); }) == ErrorKind::kInvalidArgument);

  // What fits still works, and empty shapes count nothing whatever their other sizes.
  const mtia::Layout l = mtia::Layout::contiguous({int64_t{1} << 31, int64_t{1} << 31}, 1);
  CHECK(l.strides == std::vector<int64_t>{int64_t{1} << 31, 1});
  CHECK(l.numel() == int64_t{1} << 62);
  const mtia::Layout empty{{0, int64_t{1} << 40, int64_t{1} << 40}, {1, 1, 1}, 0, 1};
  CHECK(empty.numel() == 0);
  CHECK(mtia::Layout::contiguous({}, 4).numel() == 1);
}
