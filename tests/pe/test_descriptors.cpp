// The unit-descriptor rules of docs/pe-isa.md: a valid descriptor of each kind passes, and
// each single-field mistake is rejected with the right code and a reason.
#include <catch2/catch.hpp>
#include <functional>

#include "core_harness.h"
#include "mtia/sim/pe/descriptors.h"

using namespace pe_test;
using mtia::isa::ErrorCode;
using mtia::sim::pe::validate;

namespace {

constexpr uint64_t kLs = 64 * 1024;
constexpr uint64_t L = MTIA_PE_LS_BASE;

mtia_pe_desc_header header(uint8_t kind, uint16_t flags = 0) {
  return {MTIA_PE_DESC_VERSION, kind, flags, 0};
}

template <typename D>
void expect_rejected(const D& base, const char* name, std::function<void(D&)> mutate,
                     ErrorCode code) {
  D d = base;
  mutate(d);
  INFO(name);
  auto r = validate(d, kLs);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == code);
  CHECK_FALSE(r.error().reason.empty());
}

mtia_pe_dma_desc dma_2d() {
  mtia_pe_dma_desc d{};
  d.hdr = header(MTIA_PE_DESC_DMA);
  d.ndims = 2;
  d.elem_size = 4;
  d.src_space = MTIA_PE_SPACE_DEVICE;
  d.dst_space = MTIA_PE_SPACE_LOCAL;
  d.src = 0x1000;
  d.dst = L + 0x100;
  d.sizes[0] = 3;
  d.sizes[1] = 5;
  d.src_strides[0] = 400;
  d.src_strides[1] = 4;
  d.dst_strides[0] = 20;
  d.dst_strides[1] = 4;
  return d;
}

mtia_pe_matmul_desc matmul() {
  mtia_pe_matmul_desc d{};
  d.hdr = header(MTIA_PE_DESC_MATMUL, MTIA_PE_MM_ACCUMULATE);
  d.in_dtype = MTIA_PE_DT_BF16;
  d.out_dtype = MTIA_PE_DT_FP32;
  d.m = 16;
  d.n = 8;
  d.k = 32;
  d.lda = 32;
  d.ldb = 8;
  d.ldc = 8;
  d.a = L;
  d.b = L + 0x1000;
  d.c = L + 0x2000;
  return d;
}

mtia_pe_se_desc se_add() {
  mtia_pe_se_desc d{};
  d.hdr = header(MTIA_PE_DESC_SE);
  d.op = MTIA_PE_SE_ADD;
  d.in_dtype = MTIA_PE_DT_FP16;
  d.out_dtype = MTIA_PE_DT_FP16;
  d.count = 100;
  d.src[0] = L;
  d.src[1] = L + 0x200;
  d.dst = L + 0x400;
  return d;
}

mtia_pe_re_desc re_sum() {
  mtia_pe_re_desc d{};
  d.hdr = header(MTIA_PE_DESC_RE);
  d.op = MTIA_PE_RE_SUM;
  d.in_dtype = MTIA_PE_DT_FP32;
  d.out_dtype = MTIA_PE_DT_FP32;
  d.axis = 1;
  d.rows = 4;
  d.cols = 10;
  d.ld_src = 16;
  d.src = L;
  d.dst = L + 0x1000;
  return d;
}

mtia_pe_mlu_desc mlu_transpose() {
  mtia_pe_mlu_desc d{};
  d.hdr = header(MTIA_PE_DESC_MLU);
  d.op = MTIA_PE_MLU_TRANSPOSE;
  d.elem_size = 2;
  d.rows = 3;
  d.cols = 7;
  d.ld_src = 8;
  d.ld_dst = 4;
  d.src = L;
  d.dst = L + 0x100;
  return d;
}

}  // namespace

TEST_CASE("dtype sizes and names", "[pe][desc]") {
  CHECK(mtia::sim::pe::dtype_bytes(MTIA_PE_DT_BF16) == 2);
  CHECK(mtia::sim::pe::dtype_bytes(MTIA_PE_DT_INT64) == 8);
  CHECK(mtia::sim::pe::dtype_bytes(MTIA_PE_DT_BOOL) == 1);
  CHECK(mtia::sim::pe::dtype_bytes(0) == 0);
  CHECK(mtia::sim::pe::dtype_bytes(MTIA_PE_DT_COUNT) == 0);
  CHECK(std::string(mtia::sim::pe::dtype_name(MTIA_PE_DT_FP16)) == "fp16");
}

TEST_CASE("DMA descriptors", "[pe][desc]") {
  const auto base = dma_2d();
  CHECK(validate(base, kLs).ok());
  using D = mtia_pe_dma_desc;
  expect_rejected<D>(
      base, "zeroed", [](D& d) { d = D{}; }, ErrorCode::kBadVersion);
  expect_rejected<D>(
      base, "wrong kind", [](D& d) { d.hdr.kind = MTIA_PE_DESC_SE; }, ErrorCode::kBadOpcode);
  expect_rejected<D>(
      base, "flag", [](D& d) { d.hdr.flags = 1; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "header reserved", [](D& d) { d.hdr.reserved = 1; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "reserved0", [](D& d) { d.reserved0 = 1; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "ndims 0", [](D& d) { d.ndims = 0; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "ndims 5", [](D& d) { d.ndims = 5; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "elem 3", [](D& d) { d.elem_size = 3; }, ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "space 2", [](D& d) { d.src_space = 2; }, ErrorCode::kBadAddressSpace);
  expect_rejected<D>(
      base, "size 0", [](D& d) { d.sizes[1] = 0; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "unused dim", [](D& d) { d.sizes[2] = 1; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "unused stride", [](D& d) { d.src_strides[3] = 4; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "stride", [](D& d) { d.src_strides[0] = 402; }, ErrorCode::kMisaligned);
  expect_rejected<D>(
      base, "address", [](D& d) { d.src = 0x1002; }, ErrorCode::kMisaligned);
  expect_rejected<D>(
      base, "dst stride 0", [](D& d) { d.dst_strides[0] = 0; }, ErrorCode::kBadDims);
  // 3 x 5 x 4-byte elements with row stride 20 end at +60: move the tile so it does not fit.
  expect_rejected<D>(
      base, "past the local store", [](D& d) { d.dst = L + kLs - 56; },
      ErrorCode::kDeviceAddressFault);
  expect_rejected<D>(
      base, "below the local store", [](D& d) { d.dst = L - 4; }, ErrorCode::kDeviceAddressFault);
  expect_rejected<D>(
      base, "device address overflow", [](D& d) { d.src = ~0ull - 7; }, ErrorCode::kExtentOverflow);
  expect_rejected<D>(
      base, "local to local overlap",
      [](D& d) {
        d.src_space = MTIA_PE_SPACE_LOCAL;
        d.src = d.dst + 8;
        d.src_strides[0] = 20;
      },
      ErrorCode::kUnsupported);

  auto fits = base;
  fits.dst = L + kLs - 60;  // exactly the last 60 bytes
  CHECK(validate(fits, kLs).ok());
  auto broadcast = base;
  broadcast.src_strides[0] = 0;  // a repeated source row is fine
  CHECK(validate(broadcast, kLs).ok());
  auto device_only = base;
  device_only.dst_space = MTIA_PE_SPACE_DEVICE;
  device_only.dst = 0x100'0000'0000ull;  // SRAM: not checked against the local store
  CHECK(validate(device_only, kLs).ok());
}

TEST_CASE("matmul descriptors", "[pe][desc]") {
  const auto base = matmul();
  CHECK(validate(base, kLs).ok());
  using D = mtia_pe_matmul_desc;
  for (auto [in, out] :
       {std::pair{MTIA_PE_DT_INT8, MTIA_PE_DT_INT32}, std::pair{MTIA_PE_DT_FP16, MTIA_PE_DT_FP32},
        std::pair{MTIA_PE_DT_FP32, MTIA_PE_DT_FP32}}) {
    D d = base;
    d.in_dtype = static_cast<uint8_t>(in);
    d.out_dtype = static_cast<uint8_t>(out);
    CHECK(validate(d, kLs).ok());
  }
  expect_rejected<D>(
      base, "bf16 -> bf16", [](D& d) { d.out_dtype = MTIA_PE_DT_BF16; },
      ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "int8 -> fp32", [](D& d) { d.in_dtype = MTIA_PE_DT_INT8; }, ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "flag 8", [](D& d) { d.hdr.flags |= 8; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "reserved1", [](D& d) { d.reserved1 = 1; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "k 0", [](D& d) { d.k = 0; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "lda < k", [](D& d) { d.lda = 31; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "ldc < n", [](D& d) { d.ldc = 7; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "transposed B needs ldb >= k", [](D& d) { d.hdr.flags |= MTIA_PE_MM_TRANS_B; },
      ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "A misaligned", [](D& d) { d.a = L + 1; }, ErrorCode::kMisaligned);
  expect_rejected<D>(
      base, "C past the end", [](D& d) { d.c = L + kLs - 4 * 8 * 16 + 4; },
      ErrorCode::kDeviceAddressFault);
  expect_rejected<D>(
      base, "C overlaps B", [](D& d) { d.c = d.b; }, ErrorCode::kUnsupported);
  expect_rejected<D>(
      base, "huge leading dimension", [](D& d) { d.lda = 0xffff'ffff; },
      ErrorCode::kDeviceAddressFault);

  auto trans_b = base;  // B stored n x k = 8 x 32, ldb >= k
  trans_b.hdr.flags |= MTIA_PE_MM_TRANS_B;
  trans_b.ldb = 32;
  CHECK(validate(trans_b, kLs).ok());
}

TEST_CASE("SE descriptors", "[pe][desc]") {
  const auto base = se_add();
  CHECK(validate(base, kLs).ok());
  using D = mtia_pe_se_desc;
  expect_rejected<D>(
      base, "op 0", [](D& d) { d.op = 0; }, ErrorCode::kBadOpcode);
  expect_rejected<D>(
      base, "op past the end", [](D& d) { d.op = MTIA_PE_SE_OP_COUNT; }, ErrorCode::kBadOpcode);
  expect_rejected<D>(
      base, "add on bool", [](D& d) { d.in_dtype = d.out_dtype = MTIA_PE_DT_BOOL; },
      ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "add changes dtype", [](D& d) { d.out_dtype = MTIA_PE_DT_FP32; },
      ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "exp on int32",
      [](D& d) {
        d.op = MTIA_PE_SE_EXP;
        d.in_dtype = d.out_dtype = MTIA_PE_DT_INT32;
        d.src[1] = 0;
      },
      ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "bitwise on float", [](D& d) { d.op = MTIA_PE_SE_BAND; }, ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "comparison into fp16", [](D& d) { d.op = MTIA_PE_SE_LT; }, ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "count 0", [](D& d) { d.count = 0; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "reserved1", [](D& d) { d.reserved1[4] = 1; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "unused operand c", [](D& d) { d.src[2] = L; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "mode 3", [](D& d) { d.mode[1] = 3; }, ErrorCode::kBadOpcode);
  expect_rejected<D>(
      base, "vector with an immediate", [](D& d) { d.imm[0] = 1; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "immediate with an address", [](D& d) { d.mode[1] = MTIA_PE_OPND_IMMEDIATE; },
      ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "fp16 immediate with high bits",
      [](D& d) {
        d.mode[1] = MTIA_PE_OPND_IMMEDIATE;
        d.src[1] = 0;
        d.imm[1] = 0x1'3c00;
      },
      ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "operand misaligned", [](D& d) { d.src[0] = L + 1; }, ErrorCode::kMisaligned);
  expect_rejected<D>(
      base, "output past the end", [](D& d) { d.dst = L + kLs - 198; },
      ErrorCode::kDeviceAddressFault);
  expect_rejected<D>(
      base, "partial overlap", [](D& d) { d.dst = d.src[0] + 2; }, ErrorCode::kUnsupported);
  expect_rejected<D>(
      base, "broadcast operand inside the output",
      [](D& d) {
        d.mode[1] = MTIA_PE_OPND_BROADCAST;
        d.src[1] = d.dst + 10;
      },
      ErrorCode::kUnsupported);

  auto in_place = base;
  in_place.dst = in_place.src[0];
  CHECK(validate(in_place, kLs).ok());
  auto imm = base;
  imm.mode[1] = MTIA_PE_OPND_IMMEDIATE;
  imm.src[1] = 0;
  imm.imm[1] = 0x3c00;  // 1.0 in fp16
  CHECK(validate(imm, kLs).ok());
  auto cmp = base;
  cmp.op = MTIA_PE_SE_GE;
  cmp.out_dtype = MTIA_PE_DT_BOOL;
  CHECK(validate(cmp, kLs).ok());
  auto cast = base;  // fp16 -> int64 cast, unary
  cast.op = MTIA_PE_SE_CAST;
  cast.out_dtype = MTIA_PE_DT_INT64;
  cast.src[1] = 0;
  CHECK(validate(cast, kLs).ok());
  auto select = base;  // out = cond ? b : scalar
  select.op = MTIA_PE_SE_SELECT;
  select.src[0] = L + 0x800;  // bool condition: 1 byte per lane
  select.mode[2] = MTIA_PE_OPND_IMMEDIATE;
  select.imm[2] = 0xbc00;  // -1.0 in fp16
  CHECK(validate(select, kLs).ok());
  auto bad_cond = select;
  bad_cond.src[0] = L + 0x800 + 1;  // bool is 1-byte aligned: still fine
  CHECK(validate(bad_cond, kLs).ok());
  auto clamp = base;
  clamp.op = MTIA_PE_SE_CLAMP;
  clamp.mode[1] = clamp.mode[2] = MTIA_PE_OPND_BROADCAST;
  clamp.src[2] = L + 0x202;
  CHECK(validate(clamp, kLs).ok());
}

TEST_CASE("RE descriptors", "[pe][desc]") {
  const auto base = re_sum();
  CHECK(validate(base, kLs).ok());
  using D = mtia_pe_re_desc;
  auto ok = [&](std::function<void(D&)> f) {
    D d = base;
    f(d);
    return validate(d, kLs).ok();
  };
  CHECK(ok([](D& d) { d.in_dtype = MTIA_PE_DT_BF16; }));  // bf16 summed into fp32
  CHECK(ok([](D& d) { d.in_dtype = d.out_dtype = MTIA_PE_DT_BF16; }));
  CHECK(ok([](D& d) {
    d.in_dtype = MTIA_PE_DT_INT8;
    d.out_dtype = MTIA_PE_DT_INT64;
  }));
  CHECK(ok([](D& d) {
    d.op = MTIA_PE_RE_ARGMAX;
    d.out_dtype = MTIA_PE_DT_INT64;
  }));
  CHECK(ok([](D& d) {
    d.op = MTIA_PE_RE_MAX;
    d.hdr.flags = MTIA_PE_RE_ACCUMULATE;
  }));
  CHECK(ok([](D& d) { d.axis = 0; }));
  expect_rejected<D>(
      base, "op 7", [](D& d) { d.op = 7; }, ErrorCode::kBadOpcode);
  expect_rejected<D>(
      base, "int sum into fp32", [](D& d) { d.in_dtype = MTIA_PE_DT_INT32; },
      ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "max changes dtype",
      [](D& d) {
        d.op = MTIA_PE_RE_MAX;
        d.in_dtype = MTIA_PE_DT_FP16;
      },
      ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "sumsq of ints",
      [](D& d) {
        d.op = MTIA_PE_RE_SUMSQ;
        d.in_dtype = MTIA_PE_DT_INT32;
        d.out_dtype = MTIA_PE_DT_INT64;
      },
      ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "argmax into fp32", [](D& d) { d.op = MTIA_PE_RE_ARGMAX; }, ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "argmin accumulating",
      [](D& d) {
        d.op = MTIA_PE_RE_ARGMIN;
        d.out_dtype = MTIA_PE_DT_INT32;
        d.hdr.flags = MTIA_PE_RE_ACCUMULATE;
      },
      ErrorCode::kUnsupported);
  expect_rejected<D>(
      base, "axis 2", [](D& d) { d.axis = 2; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "ld < cols", [](D& d) { d.ld_src = 9; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "rows 0", [](D& d) { d.rows = 0; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "flag 2", [](D& d) { d.hdr.flags = 2; }, ErrorCode::kReservedNotZero);
  expect_rejected<D>(
      base, "overlap", [](D& d) { d.dst = d.src + 4; }, ErrorCode::kUnsupported);
  // axis 1 writes one value per row (4 x 4 bytes), axis 0 one per column (10 x 4 bytes)
  expect_rejected<D>(
      base, "axis 0 output past the end",
      [](D& d) {
        d.axis = 0;
        d.dst = L + kLs - 36;
      },
      ErrorCode::kDeviceAddressFault);
  CHECK(ok([](D& d) { d.dst = L + kLs - 16; }));
}

TEST_CASE("MLU descriptors", "[pe][desc]") {
  const auto base = mlu_transpose();
  CHECK(validate(base, kLs).ok());
  using D = mtia_pe_mlu_desc;
  expect_rejected<D>(
      base, "op 3", [](D& d) { d.op = 3; }, ErrorCode::kBadOpcode);
  expect_rejected<D>(
      base, "elem 16", [](D& d) { d.elem_size = 16; }, ErrorCode::kBadElementSize);
  expect_rejected<D>(
      base, "transpose ld_dst < rows", [](D& d) { d.ld_dst = 2; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "copy ld_dst < cols", [](D& d) { d.op = MTIA_PE_MLU_COPY; }, ErrorCode::kBadDims);
  expect_rejected<D>(
      base, "misaligned", [](D& d) { d.dst = L + 0x101; }, ErrorCode::kMisaligned);
  expect_rejected<D>(
      base, "overlap", [](D& d) { d.dst = L + 8; }, ErrorCode::kUnsupported);
  expect_rejected<D>(
      base, "reserved1", [](D& d) { d.reserved1 = 1; }, ErrorCode::kReservedNotZero);
  // The transposed tile is 7 rows of ld_dst 4: (6 * 4 + 3) * 2 = 54 bytes.
  auto last = base;
  last.dst = L + kLs - 54;
  CHECK(validate(last, kLs).ok());
  last.dst += 2;
  CHECK_FALSE(validate(last, kLs).ok());
}

TEST_CASE("read_descriptor reads through the core", "[pe][desc]") {
  Machine m;
  auto& c = m.load({kEcall});
  auto d = se_add();
  const uint64_t at = MTIA_PE_LS_BASE + 0x8000;
  REQUIRE(c.write_memory(at, {reinterpret_cast<const uint8_t*>(&d), sizeof d}));
  auto r = mtia::sim::pe::read_descriptor<mtia_pe_se_desc>(c, at);
  REQUIRE(r.ok());
  CHECK(r.value().count == 100);

  auto misaligned = mtia::sim::pe::read_descriptor<mtia_pe_se_desc>(c, at + 4);
  REQUIRE_FALSE(misaligned.ok());
  CHECK(misaligned.error().code == ErrorCode::kMisaligned);
  auto unmapped = mtia::sim::pe::read_descriptor<mtia_pe_se_desc>(c, 0x40);
  REQUIRE_FALSE(unmapped.ok());
  CHECK(unmapped.error().code == ErrorCode::kDeviceAddressFault);
  // The SE descriptor read as a DMA descriptor is caught by its kind.
  auto wrong = mtia::sim::pe::read_descriptor<mtia_pe_dma_desc>(c, at);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().code == ErrorCode::kBadOpcode);
}

extern "C" unsigned long pe_ops_c99_descriptor_bytes(void);

TEST_CASE("the C99 view of pe_ops.h has the same layouts", "[pe][desc]") {
  CHECK(pe_ops_c99_descriptor_bytes() == 128 + 64 + 80 + 48 + 48);
}
