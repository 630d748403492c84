// The Unit interface (sim/pe/unit.h) of each compute unit on its own: validate gives the
// descriptor rules' errors (descriptors.h) word for word, cost gives the throughput model's
// numbers, touched and host_cost_ns describe what the math reads and writes, and execute is
// what FunctionalUnits runs. The SE is checked against its op table (isa/pe/se_ops.h): every
// row has a kernel and the cost class of its row.
#include <catch2/catch.hpp>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "mtia/isa/pe/se_ops.h"
#include "mtia/sim/pe/descriptors.h"
#include "mtia/sim/pe/dpe_unit.h"
#include "mtia/sim/pe/mlu_unit.h"
#include "mtia/sim/pe/re_unit.h"
#include "mtia/sim/pe/se_unit.h"
#include "mtia/sim/pe/units.h"

namespace pe = mtia::sim::pe;

namespace {

constexpr uint64_t L = MTIA_PE_LS_BASE;
constexpr size_t kLsBytes = 256 * 1024;

struct LocalStore {
  std::vector<uint64_t> words = std::vector<uint64_t>(kLsBytes / 8, 0);
  std::span<uint8_t> bytes{reinterpret_cast<uint8_t*>(words.data()), kLsBytes};
};

mtia_pe_desc_header header(uint8_t kind, uint16_t flags = 0) {
  return {MTIA_PE_DESC_VERSION, kind, flags, 0};
}

mtia_pe_matmul_desc matmul(uint8_t in, uint8_t out, uint32_t m, uint32_t n, uint32_t k) {
  mtia_pe_matmul_desc d{};
  d.hdr = header(MTIA_PE_DESC_MATMUL);
  d.in_dtype = in;
  d.out_dtype = out;
  d.m = m;
  d.n = n;
  d.k = k;
  d.lda = k;
  d.ldb = n;
  d.ldc = n;
  d.a = L;
  d.b = L + 65536;
  d.c = L + 131072;
  return d;
}

mtia_pe_se_desc eltwise(uint8_t op, uint8_t in, uint8_t out, uint32_t count) {
  mtia_pe_se_desc d{};
  d.hdr = header(MTIA_PE_DESC_SE);
  d.op = op;
  d.in_dtype = in;
  d.out_dtype = out;
  d.count = count;
  for (int j = 0; j < mtia_pe_se_info(op).arity; ++j) {
    d.mode[j] = MTIA_PE_OPND_VECTOR;
    d.src[j] = L + 32768 * uint64_t(j);
  }
  d.dst = L + 131072;
  return d;
}

mtia_pe_re_desc reduce(uint8_t op, uint8_t in, uint8_t out, uint32_t rows, uint32_t cols) {
  mtia_pe_re_desc d{};
  d.hdr = header(MTIA_PE_DESC_RE);
  d.op = op;
  d.in_dtype = in;
  d.out_dtype = out;
  d.axis = 1;
  d.rows = rows;
  d.cols = cols;
  d.ld_src = cols;
  d.src = L;
  d.dst = L + 131072;
  return d;
}

mtia_pe_mlu_desc layout(uint8_t op, uint8_t elem, uint32_t rows, uint32_t cols) {
  mtia_pe_mlu_desc d{};
  d.hdr = header(MTIA_PE_DESC_MLU);
  d.op = op;
  d.elem_size = elem;
  d.rows = rows;
  d.cols = cols;
  d.ld_src = cols;
  d.ld_dst = op == MTIA_PE_MLU_TRANSPOSE ? rows : cols;
  d.src = L;
  d.dst = L + 131072;
  return d;
}

// The unit's verdict is the descriptor rules' verdict, code and words.
template <typename U>
void check_same_verdict(const U& unit, const typename U::Descriptor& d) {
  const auto got = unit.validate(d);
  const auto want = pe::validate(d, kLsBytes);
  REQUIRE(got.ok() == want.ok());
  if (!got) {
    CHECK(got.error().code == want.error().code);
    CHECK(got.error().reason == want.error().reason);
  }
}

}  // namespace

TEST_CASE("unit interface: validate rejects bad descriptors with the descriptor rules' errors",
          "[units][interface]") {
  LocalStore ls;
  const pe::UnitTiming t;
  pe::DpeUnit dpe(ls.bytes, t);
  pe::SeUnit se(ls.bytes, t);
  pe::ReUnit re(ls.bytes, t);
  pe::MluUnit mlu(ls.bytes, t);

  auto mm = matmul(MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 16, 16, 16);
  CHECK(dpe.validate(mm).ok());
  auto bad_mm = mm;
  bad_mm.hdr.version = 0;
  CHECK_THAT(dpe.validate(bad_mm).error().reason, Catch::Contains("version 0"));
  check_same_verdict(dpe, bad_mm);
  bad_mm = mm;
  bad_mm.c = L + kLsBytes - 4;  // C runs past the end of the local store
  CHECK(dpe.validate(bad_mm).error().code == mtia::isa::ErrorCode::kDeviceAddressFault);
  check_same_verdict(dpe, bad_mm);
  bad_mm = mm;
  bad_mm.out_dtype = MTIA_PE_DT_FP16;
  check_same_verdict(dpe, bad_mm);
  CHECK_FALSE(dpe.validate(bad_mm).ok());

  auto add = eltwise(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 100);
  CHECK(se.validate(add).ok());
  auto bad_se = add;
  bad_se.op = 200;
  CHECK(se.validate(bad_se).error().reason == "SE op 200 is not defined");
  CHECK(se.validate(bad_se).error().code == mtia::isa::ErrorCode::kBadOpcode);
  bad_se = add;
  bad_se.op = MTIA_PE_SE_SHL;  // an integer op on fp32: the table's input class says no
  check_same_verdict(se, bad_se);
  CHECK_THAT(se.validate(bad_se).error().reason, Catch::Contains("bitwise_left_shift"));
  bad_se = add;
  bad_se.out_dtype = MTIA_PE_DT_BOOL;  // add keeps its input dtype
  check_same_verdict(se, bad_se);
  CHECK_FALSE(se.validate(bad_se).ok());
  bad_se = add;
  bad_se.imm[2] = 1;  // operand c is unused by add
  check_same_verdict(se, bad_se);
  CHECK_THAT(se.validate(bad_se).error().reason, Catch::Contains("unused"));
  bad_se = add;
  bad_se.count = 0;
  CHECK(se.validate(bad_se).error().reason == "SE count is zero");

  auto sum = reduce(MTIA_PE_RE_SUM, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 8, 8);
  CHECK(re.validate(sum).ok());
  auto bad_re = sum;
  bad_re.axis = 2;
  CHECK(re.validate(bad_re).error().reason == "RE axis 2 is not 0 or 1");
  bad_re = reduce(MTIA_PE_RE_ARGMAX, MTIA_PE_DT_FP32, MTIA_PE_DT_INT64, 8, 8);
  bad_re.hdr.flags = MTIA_PE_RE_ACCUMULATE;
  check_same_verdict(re, bad_re);
  CHECK_THAT(re.validate(bad_re).error().reason, Catch::Contains("cannot accumulate"));

  auto tr = layout(MTIA_PE_MLU_TRANSPOSE, 4, 8, 16);
  CHECK(mlu.validate(tr).ok());
  auto bad_mlu = tr;
  bad_mlu.elem_size = 3;
  CHECK(mlu.validate(bad_mlu).error().reason == "MLU elem_size 3 is not 1, 2, 4 or 8");
  bad_mlu = tr;
  bad_mlu.dst = L + 64;  // overlaps the source
  check_same_verdict(mlu, bad_mlu);
  CHECK(mlu.validate(bad_mlu).error().reason == "MLU source and destination overlap");

  // FunctionalUnits answers with the unit's rejection and writes nothing.
  pe::FunctionalUnits units(ls.bytes, t);
  ls.bytes[131072] = 0x5a;
  auto r = units.eltwise(bad_se);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().reason == se.validate(bad_se).error().reason);
  CHECK(ls.bytes[131072] == 0x5a);
}

TEST_CASE("unit interface: cost is the throughput model's", "[units][interface]") {
  LocalStore ls;
  pe::UnitTiming v1;  // the mtia-v1 preset's figures
  v1.dpe_int8_macs_per_cycle = 1024;
  v1.dpe_fp16_macs_per_cycle = 512;
  v1.dpe_fp32_macs_per_cycle = 128;
  v1.se_vector_bytes = 64;
  v1.se_elements_per_cycle = 64;
  v1.re_elements_per_cycle = 16;
  v1.mlu_bytes_per_cycle = 64;
  const pe::UnitTiming v2;

  // DPE: issue + ceil(m*n*k / rate); work in MACs.
  const auto mm8 = matmul(MTIA_PE_DT_INT8, MTIA_PE_DT_INT32, 64, 64, 64);
  CHECK(pe::DpeUnit(ls.bytes, v2).cost(mm8).busy_cycles == 262144 / 2048 + 16);
  CHECK(pe::DpeUnit(ls.bytes, v1).cost(mm8).busy_cycles == 262144 / 1024 + 16);
  CHECK(pe::DpeUnit(ls.bytes, v2).cost(mm8).work == 262144);
  const auto mm32 = matmul(MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 5, 7, 3);  // 105 MACs
  CHECK(pe::DpeUnit(ls.bytes, v2).cost(mm32).busy_cycles == 1 + 16);
  const auto mmbf = matmul(MTIA_PE_DT_BF16, MTIA_PE_DT_FP32, 32, 64, 33);  // 67584 MACs
  CHECK(pe::DpeUnit(ls.bytes, v1).cost(mmbf).busy_cycles == 132 + 16);

  // SE: issue + ceil(count / lanes) * cycles of the op's cost class.
  pe::SeUnit se2(ls.bytes, v2), se1(ls.bytes, v1);
  const auto add = eltwise(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 1000);
  CHECK(se2.cost(add).busy_cycles == 16 + 8);  // v2: 64 lanes; v1: 16 fp32 lanes
  CHECK(se1.cost(add).busy_cycles == 63 + 8);
  CHECK(se2.cost(add).work == 1000);
  const auto cast = eltwise(MTIA_PE_SE_CAST, MTIA_PE_DT_INT8, MTIA_PE_DT_INT64, 129);
  CHECK(se2.cost(cast).busy_cycles == 5 + 8);   // int64 is the widest: 256 / 8 = 32 lanes
  CHECK(se1.cost(cast).busy_cycles == 17 + 8);  // v1: 64 / 8 = 8 lanes

  // RE: issue + ceil(rows*cols / rate); MLU: issue + ceil(bytes / rate).
  const auto sum = reduce(MTIA_PE_RE_SUM, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 100, 33);
  CHECK(pe::ReUnit(ls.bytes, v2).cost(sum).busy_cycles == 104 + 8);
  CHECK(pe::ReUnit(ls.bytes, v1).cost(sum).busy_cycles == 207 + 8);
  CHECK(pe::ReUnit(ls.bytes, v1).cost(sum).work == 3300);
  const auto tr = layout(MTIA_PE_MLU_TRANSPOSE, 4, 64, 64);
  CHECK(pe::MluUnit(ls.bytes, v2).cost(tr).busy_cycles == 128 + 8);
  CHECK(pe::MluUnit(ls.bytes, v1).cost(tr).busy_cycles == 256 + 8);
  CHECK(pe::MluUnit(ls.bytes, v1).cost(tr).work == 16384);
}

TEST_CASE("unit interface: every SE op of the table runs and costs by its row",
          "[units][interface][se]") {
  LocalStore ls;
  pe::UnitTiming t;
  t.se_simple_cycles = 1;
  t.se_divide_cycles = 3;
  t.se_transcendental_cycles = 7;
  pe::SeUnit se(ls.bytes, t);
  struct Row {
    uint8_t code, in_class, out_rule, cost;
  };
  const Row rows[] = {
#define ROW(NAME_, code_, arity_, in_, out_, cost_, name_) \
  {code_, MTIA_PE_SE_IN_##in_, MTIA_PE_SE_OUT_##out_, MTIA_PE_SE_COST_##cost_},
      MTIA_PE_SE_OPS(ROW)
#undef ROW
  };
  for (const Row& row : rows) {
    INFO("SE op " << int(row.code) << " " << mtia_pe_se_info(row.code).name);
    const uint8_t in =
        row.in_class == MTIA_PE_SE_IN_INT_OR_BOOL || row.in_class == MTIA_PE_SE_IN_INT
            ? uint8_t{MTIA_PE_DT_INT32}
            : uint8_t{MTIA_PE_DT_FP32};
    const uint8_t out = row.out_rule == MTIA_PE_SE_OUT_BOOL ? uint8_t{MTIA_PE_DT_BOOL} : in;
    auto d = eltwise(row.code, in, out, 100);
    if (row.code == MTIA_PE_SE_SELECT) d.src[0] = L + 120000;  // a bool condition
    REQUIRE(se.validate(d).ok());
    const uint32_t per_vector = row.cost == MTIA_PE_SE_COST_DIVIDE           ? 3
                                : row.cost == MTIA_PE_SE_COST_TRANSCENDENTAL ? 7
                                                                             : 1;
    // 100 elements of 4 bytes (bool outputs are narrower; the input is the widest): 64 lanes,
    // 2 vectors.
    CHECK(se.cost(d).busy_cycles == 8 + 2 * per_vector);
    CHECK(se.host_cost_ns(d) == (row.cost == MTIA_PE_SE_COST_TRANSCENDENTAL ? 500u : 50u));
    std::memset(ls.bytes.data() + 131072, 0xee, 512);
    se.execute(d);                                                 // every row has a kernel
    CHECK(ls.bytes[131072 + 100 * pe::dtype_bytes(out)] == 0xee);  // nothing past the output
  }
}

TEST_CASE("unit interface: touched bytes and execute", "[units][interface]") {
  LocalStore ls;
  const pe::UnitTiming t;

  // SE: memory operands and the output; an immediate operand touches nothing.
  pe::SeUnit se(ls.bytes, t);
  auto mul = eltwise(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 10);
  mul.mode[1] = MTIA_PE_OPND_IMMEDIATE;
  mul.src[1] = 0;
  const float two = 2.0f;
  std::memcpy(&mul.imm[1], &two, 4);
  const pe::Touched st = se.touched(mul);
  CHECK((st[0].lo == 0 && st[0].hi == 40));
  CHECK(st[1].lo == st[1].hi);
  CHECK((st[3].lo == 131072 && st[3].hi == 131072 + 40));
  for (int i = 0; i < 10; ++i) {
    const float v = float(i);
    std::memcpy(ls.bytes.data() + 4 * i, &v, 4);
  }
  se.execute(mul);
  for (int i = 0; i < 10; ++i) {
    float v;
    std::memcpy(&v, ls.bytes.data() + 131072 + 4 * i, 4);
    CHECK(v == 2.0f * float(i));
  }

  // DPE: A, B and C tiles; MLU and RE: source and destination.
  pe::DpeUnit dpe(ls.bytes, t);
  const auto mm = matmul(MTIA_PE_DT_FP16, MTIA_PE_DT_FP32, 4, 8, 16);
  const pe::Touched dt = dpe.touched(mm);
  CHECK((dt[0].lo == 0 && dt[0].hi == 4 * 16 * 2));
  CHECK((dt[1].lo == 65536 && dt[1].hi == 65536 + 16 * 8 * 2));
  CHECK((dt[2].lo == 131072 && dt[2].hi == 131072 + 4 * 8 * 4));
  CHECK(dpe.host_cost_ns(mm) == 4 * 8 * 16 / 32);
  pe::MluUnit mlu(ls.bytes, t);
  const pe::Touched mt = mlu.touched(layout(MTIA_PE_MLU_TRANSPOSE, 2, 3, 5));
  CHECK((mt[0].hi == 30 && mt[1].lo == 131072 && mt[1].hi == 131072 + 30));
  pe::ReUnit re(ls.bytes, t);
  const pe::Touched rt =
      re.touched(reduce(MTIA_PE_RE_ARGMAX, MTIA_PE_DT_FP32, MTIA_PE_DT_INT64, 6, 7));
  CHECK((rt[0].hi == 6 * 7 * 4 && rt[1].hi - rt[1].lo == 6 * 8));
  CHECK(re.kind() == pe::UnitKind::kRe);
  CHECK(std::string(pe::unit_kind_name(mlu.kind())) == "mlu");
}
