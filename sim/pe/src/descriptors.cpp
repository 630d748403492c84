#include "mtia/sim/pe/descriptors.h"

#include <fmt/format.h>

namespace mtia::sim::pe {
namespace {

using isa::ErrorCode;
using Check = isa::Status;
using u128 = unsigned __int128;

Check fail(ErrorCode code, std::string why) {
  return isa::reject(code, std::move(why));
}

const char* kind_name(uint8_t kind) {
  switch (kind) {
    case MTIA_PE_DESC_DMA:
      return "DMA";
    case MTIA_PE_DESC_MATMUL:
      return "matmul";
    case MTIA_PE_DESC_SE:
      return "SE";
    case MTIA_PE_DESC_RE:
      return "RE";
    case MTIA_PE_DESC_MLU:
      return "MLU";
    default:
      return "unknown";
  }
}

Check check_header(const mtia_pe_desc_header& h, uint8_t kind, uint16_t flags_mask) {
  if (h.version != MTIA_PE_DESC_VERSION) {
    return fail(ErrorCode::kBadVersion,
                fmt::format("{} descriptor has version {}, expected {} (uninitialised?)",
                            kind_name(kind), h.version, MTIA_PE_DESC_VERSION));
  }
  if (h.kind != kind) {
    return fail(ErrorCode::kBadOpcode,
                fmt::format("a {} descriptor (kind {}) was given where a {} descriptor belongs",
                            kind_name(h.kind), h.kind, kind_name(kind)));
  }
  if ((h.flags & ~flags_mask) != 0) {
    return fail(ErrorCode::kReservedNotZero,
                fmt::format("{} descriptor sets undefined flag bits {:#x}", kind_name(kind),
                            h.flags & ~flags_mask));
  }
  if (h.reserved != 0) {
    return fail(ErrorCode::kReservedNotZero,
                fmt::format("{} descriptor header reserved field is not zero", kind_name(kind)));
  }
  return {};
}

Check reserved_zero(const char* what, uint64_t value) {
  if (value == 0) return {};
  return fail(ErrorCode::kReservedNotZero, fmt::format("{} must be zero", what));
}

// An operand of `bytes` bytes at `addr` must be aligned and inside the local store.
Check check_local(const char* what, uint64_t addr, u128 bytes, unsigned align, uint64_t ls) {
  if (addr % align != 0) {
    return fail(ErrorCode::kMisaligned,
                fmt::format("{} address {:#x} is not {}-byte aligned", what, addr, align));
  }
  const uint64_t off = addr - MTIA_PE_LS_BASE;
  if (addr < MTIA_PE_LS_BASE || off > ls || bytes > u128{ls - off}) {
    return fail(ErrorCode::kDeviceAddressFault,
                fmt::format("{} [{:#x}, +{} bytes) is not inside the local store [{:#x}, {:#x})",
                            what, addr, static_cast<uint64_t>(std::min<u128>(bytes, ~0ull)),
                            MTIA_PE_LS_BASE, MTIA_PE_LS_BASE + ls));
  }
  return {};
}

// Bytes spanned by a rows x cols tile with leading dimension ld (elements).
u128 tile_bytes(uint32_t rows, uint32_t cols, uint32_t ld, unsigned elem) {
  return (u128{rows - 1u} * ld + cols) * elem;
}

bool overlaps(uint64_t a, u128 an, uint64_t b, u128 bn) {
  return u128{a} < u128{b} + bn && u128{b} < u128{a} + an;
}

bool is_float(uint8_t dt) {
  return dt == MTIA_PE_DT_FP32 || dt == MTIA_PE_DT_FP16 || dt == MTIA_PE_DT_BF16;
}
bool is_int(uint8_t dt) {
  return dt == MTIA_PE_DT_INT8 || dt == MTIA_PE_DT_INT32 || dt == MTIA_PE_DT_INT64;
}
bool valid_elem_size(uint8_t s) {
  return s == 1 || s == 2 || s == 4 || s == 8;
}

Check bad_dtype(const char* what, uint8_t dt) {
  return fail(ErrorCode::kBadElementSize,
              fmt::format("{} dtype {} ({}) is not allowed here", what, dt, dtype_name(dt)));
}

bool in_class_accepts(uint8_t c, uint8_t dt) {
  switch (c) {
    case MTIA_PE_SE_IN_ANY:
      return true;
    case MTIA_PE_SE_IN_NUMERIC:
      return is_float(dt) || is_int(dt);
    case MTIA_PE_SE_IN_FLOAT:
      return is_float(dt);
    case MTIA_PE_SE_IN_INT_OR_BOOL:
      return is_int(dt) || dt == MTIA_PE_DT_BOOL;
    case MTIA_PE_SE_IN_INT:
      return is_int(dt);
    default:
      return false;
  }
}

}  // namespace

unsigned dtype_bytes(uint8_t dtype) {
  switch (dtype) {
    case MTIA_PE_DT_FP32:
      return 4;
    case MTIA_PE_DT_FP16:
      return 2;
    case MTIA_PE_DT_BF16:
      return 2;
    case MTIA_PE_DT_INT8:
      return 1;
    case MTIA_PE_DT_INT32:
      return 4;
    case MTIA_PE_DT_INT64:
      return 8;
    case MTIA_PE_DT_BOOL:
      return 1;
    default:
      return 0;
  }
}

const char* dtype_name(uint8_t dtype) {
  switch (dtype) {
    case MTIA_PE_DT_FP32:
      return "fp32";
    case MTIA_PE_DT_FP16:
      return "fp16";
    case MTIA_PE_DT_BF16:
      return "bf16";
    case MTIA_PE_DT_INT8:
      return "int8";
    case MTIA_PE_DT_INT32:
      return "int32";
    case MTIA_PE_DT_INT64:
      return "int64";
    case MTIA_PE_DT_BOOL:
      return "bool";
    default:
      return "invalid";
  }
}

Check validate(const mtia_pe_dma_desc& d, uint64_t ls_bytes) {
  if (Check c = check_header(d.hdr, MTIA_PE_DESC_DMA, 0); !c) return c;
  if (Check c = reserved_zero("DMA descriptor reserved0", d.reserved0); !c) return c;
  if (d.ndims < 1 || d.ndims > MTIA_PE_DMA_MAX_DIMS) {
    return fail(ErrorCode::kBadDims,
                fmt::format("DMA ndims {} is not in 1..{}", d.ndims, MTIA_PE_DMA_MAX_DIMS));
  }
  if (!valid_elem_size(d.elem_size)) {
    return fail(ErrorCode::kBadElementSize,
                fmt::format("DMA elem_size {} is not 1, 2, 4 or 8", d.elem_size));
  }
  if (d.src_space >= MTIA_PE_SPACE_COUNT || d.dst_space >= MTIA_PE_SPACE_COUNT) {
    return fail(ErrorCode::kBadAddressSpace,
                fmt::format("DMA address spaces src {} / dst {}: each must be 0 (local) or 1 "
                            "(device)",
                            d.src_space, d.dst_space));
  }
  const unsigned es = d.elem_size;
  u128 src_span = es;
  u128 dst_span = es;
  for (int i = 0; i < MTIA_PE_DMA_MAX_DIMS; ++i) {
    if (i >= d.ndims) {
      if (d.sizes[i] != 0 || d.src_strides[i] != 0 || d.dst_strides[i] != 0) {
        return fail(ErrorCode::kReservedNotZero,
                    fmt::format("DMA dimension {} is beyond ndims {} but its size or strides "
                                "are not zero",
                                i, d.ndims));
      }
      continue;
    }
    if (d.sizes[i] == 0) {
      return fail(ErrorCode::kBadDims, fmt::format("DMA sizes[{}] is zero", i));
    }
    if (d.src_strides[i] % es != 0 || d.dst_strides[i] % es != 0) {
      return fail(ErrorCode::kMisaligned,
                  fmt::format("DMA strides of dimension {} ({}, {}) are not multiples of the "
                              "{}-byte element",
                              i, d.src_strides[i], d.dst_strides[i], es));
    }
    if (d.dst_strides[i] == 0 && d.sizes[i] > 1) {
      return fail(ErrorCode::kBadDims,
                  fmt::format("DMA destination stride of dimension {} is 0 with {} elements: "
                              "the writes would land on one another",
                              i, d.sizes[i]));
    }
    src_span += u128{d.sizes[i] - 1} * d.src_strides[i];
    dst_span += u128{d.sizes[i] - 1} * d.dst_strides[i];
  }
  if (d.src % es != 0 || d.dst % es != 0) {
    return fail(
        ErrorCode::kMisaligned,
        fmt::format("DMA addresses {:#x} -> {:#x} are not {}-byte aligned", d.src, d.dst, es));
  }
  if (u128{d.src} + src_span > (u128{1} << 64) || u128{d.dst} + dst_span > (u128{1} << 64)) {
    return fail(ErrorCode::kExtentOverflow, "DMA region runs past the 64-bit address space");
  }
  if (d.src_space == MTIA_PE_SPACE_LOCAL) {
    if (Check c = check_local("DMA source", d.src, src_span, es, ls_bytes); !c) return c;
  }
  if (d.dst_space == MTIA_PE_SPACE_LOCAL) {
    if (Check c = check_local("DMA destination", d.dst, dst_span, es, ls_bytes); !c) return c;
  }
  if (d.src_space == MTIA_PE_SPACE_LOCAL && d.dst_space == MTIA_PE_SPACE_LOCAL &&
      overlaps(d.src, src_span, d.dst, dst_span)) {
    return fail(ErrorCode::kUnsupported, "DMA source and destination overlap in the local store");
  }
  return {};
}

Check validate(const mtia_pe_matmul_desc& d, uint64_t ls_bytes) {
  if (Check c = check_header(d.hdr, MTIA_PE_DESC_MATMUL, MTIA_PE_MM_FLAGS_MASK); !c) return c;
  if (Check c = reserved_zero("matmul descriptor reserved0", d.reserved0); !c) return c;
  if (Check c = reserved_zero("matmul descriptor reserved1", d.reserved1); !c) return c;
  const bool pair_ok = (d.in_dtype == MTIA_PE_DT_INT8 && d.out_dtype == MTIA_PE_DT_INT32) ||
                       (d.in_dtype == MTIA_PE_DT_FP16 && d.out_dtype == MTIA_PE_DT_FP32) ||
                       (d.in_dtype == MTIA_PE_DT_BF16 && d.out_dtype == MTIA_PE_DT_FP32) ||
                       (d.in_dtype == MTIA_PE_DT_FP32 && d.out_dtype == MTIA_PE_DT_FP32);
  if (!pair_ok) {
    return fail(ErrorCode::kBadElementSize,
                fmt::format("matmul {} -> {} is not supported (int8->int32, fp16->fp32, "
                            "bf16->fp32, fp32->fp32)",
                            dtype_name(d.in_dtype), dtype_name(d.out_dtype)));
  }
  if (d.m == 0 || d.n == 0 || d.k == 0) {
    return fail(ErrorCode::kBadDims,
                fmt::format("matmul m, n, k = {}, {}, {}: each must be >= 1", d.m, d.n, d.k));
  }
  const bool ta = (d.hdr.flags & MTIA_PE_MM_TRANS_A) != 0;
  const bool tb = (d.hdr.flags & MTIA_PE_MM_TRANS_B) != 0;
  // Stored shapes (rows x cols) of A, B and C.
  const uint32_t a_rows = ta ? d.k : d.m, a_cols = ta ? d.m : d.k;
  const uint32_t b_rows = tb ? d.n : d.k, b_cols = tb ? d.k : d.n;
  if (d.lda < a_cols || d.ldb < b_cols || d.ldc < d.n) {
    return fail(ErrorCode::kBadDims,
                fmt::format("matmul leading dimensions lda {} ldb {} ldc {} must be at least the "
                            "stored row lengths {} {} {}",
                            d.lda, d.ldb, d.ldc, a_cols, b_cols, d.n));
  }
  const unsigned ie = dtype_bytes(d.in_dtype);
  const unsigned oe = dtype_bytes(d.out_dtype);
  const u128 a_bytes = tile_bytes(a_rows, a_cols, d.lda, ie);
  const u128 b_bytes = tile_bytes(b_rows, b_cols, d.ldb, ie);
  const u128 c_bytes = tile_bytes(d.m, d.n, d.ldc, oe);
  if (Check c = check_local("matmul A", d.a, a_bytes, ie, ls_bytes); !c) return c;
  if (Check c = check_local("matmul B", d.b, b_bytes, ie, ls_bytes); !c) return c;
  if (Check c = check_local("matmul C", d.c, c_bytes, oe, ls_bytes); !c) return c;
  if (overlaps(d.c, c_bytes, d.a, a_bytes) || overlaps(d.c, c_bytes, d.b, b_bytes)) {
    return fail(ErrorCode::kUnsupported, "matmul C overlaps A or B");
  }
  return {};
}

Check validate(const mtia_pe_se_desc& d, uint64_t ls_bytes) {
  if (Check c = check_header(d.hdr, MTIA_PE_DESC_SE, 0); !c) return c;
  if (Check c = reserved_zero("SE descriptor reserved0", d.reserved0); !c) return c;
  for (uint8_t b : d.reserved1) {
    if (Check c = reserved_zero("SE descriptor reserved1", b); !c) return c;
  }
  const mtia_pe_se_op_info rule = mtia_pe_se_info(d.op);
  if (rule.name == nullptr) {
    return fail(ErrorCode::kBadOpcode, fmt::format("SE op {} is not defined", d.op));
  }
  if (dtype_bytes(d.in_dtype) == 0 || !in_class_accepts(rule.in_class, d.in_dtype)) {
    return bad_dtype(fmt::format("SE {} input", rule.name).c_str(), d.in_dtype);
  }
  const bool out_ok = rule.out_rule == MTIA_PE_SE_OUT_SAME   ? d.out_dtype == d.in_dtype
                      : rule.out_rule == MTIA_PE_SE_OUT_BOOL ? d.out_dtype == MTIA_PE_DT_BOOL
                                                             : dtype_bytes(d.out_dtype) != 0;
  if (!out_ok) return bad_dtype(fmt::format("SE {} output", rule.name).c_str(), d.out_dtype);
  if (d.count == 0) return fail(ErrorCode::kBadDims, "SE count is zero");

  const unsigned oe = dtype_bytes(d.out_dtype);
  const u128 out_bytes = u128{d.count} * oe;
  if (Check c = check_local("SE output", d.dst, out_bytes, oe, ls_bytes); !c) return c;
  static const char* const kName[3] = {"SE operand a", "SE operand b", "SE operand c"};
  for (int i = 0; i < 3; ++i) {
    if (i >= rule.arity) {
      if (d.mode[i] != 0 || d.src[i] != 0 || d.imm[i] != 0) {
        return fail(ErrorCode::kReservedNotZero,
                    fmt::format("{} is unused by {} but its mode, address or immediate is not "
                                "zero",
                                kName[i], rule.name));
      }
      continue;
    }
    const bool is_cond = d.op == MTIA_PE_SE_SELECT && i == 0;  // select's condition is bool
    const uint8_t dt = is_cond ? uint8_t{MTIA_PE_DT_BOOL} : d.in_dtype;
    const unsigned es = dtype_bytes(dt);
    switch (d.mode[i]) {
      case MTIA_PE_OPND_VECTOR:
      case MTIA_PE_OPND_BROADCAST: {
        if (d.imm[i] != 0) {
          return fail(
              ErrorCode::kReservedNotZero,
              fmt::format("{} is read from memory but its immediate is not zero", kName[i]));
        }
        const bool vec = d.mode[i] == MTIA_PE_OPND_VECTOR;
        const u128 bytes = vec ? u128{d.count} * es : u128{es};
        if (Check c = check_local(kName[i], d.src[i], bytes, es, ls_bytes); !c) return c;
        // In place is fine (each lane reads before it writes); any other overlap is not.
        const bool in_place = vec && d.src[i] == d.dst && es == oe;
        if (!in_place && overlaps(d.src[i], bytes, d.dst, out_bytes)) {
          return fail(
              ErrorCode::kUnsupported,
              fmt::format("{} overlaps the output without being exactly in place", kName[i]));
        }
        break;
      }
      case MTIA_PE_OPND_IMMEDIATE:
        if (d.src[i] != 0) {
          return fail(ErrorCode::kReservedNotZero,
                      fmt::format("{} is immediate but its address is not zero", kName[i]));
        }
        if ((es < 8 && (d.imm[i] >> (8 * es)) != 0) || (dt == MTIA_PE_DT_BOOL && d.imm[i] > 1)) {
          return fail(ErrorCode::kReservedNotZero,
                      fmt::format("{} immediate {:#x} has bits beyond its {}-byte {} value",
                                  kName[i], d.imm[i], es, dtype_name(dt)));
        }
        break;
      default:
        return fail(ErrorCode::kBadOpcode,
                    fmt::format("{} mode {} is not defined", kName[i], d.mode[i]));
    }
  }
  return {};
}

Check validate(const mtia_pe_re_desc& d, uint64_t ls_bytes) {
  if (Check c = check_header(d.hdr, MTIA_PE_DESC_RE, MTIA_PE_RE_FLAGS_MASK); !c) return c;
  if (Check c = reserved_zero("RE descriptor reserved0", d.reserved0); !c) return c;
  if (Check c = reserved_zero("RE descriptor reserved1", d.reserved1); !c) return c;
  if (d.op == MTIA_PE_RE_INVALID || d.op >= MTIA_PE_RE_OP_COUNT) {
    return fail(ErrorCode::kBadOpcode, fmt::format("RE op {} is not defined", d.op));
  }
  const uint8_t in = d.in_dtype;
  const uint8_t out = d.out_dtype;
  if (dtype_bytes(in) == 0) return bad_dtype("RE input", in);
  bool ok = false;
  const bool index_out = out == MTIA_PE_DT_INT32 || out == MTIA_PE_DT_INT64;
  switch (d.op) {
    case MTIA_PE_RE_SUM:
      ok = is_float(in) ? (out == MTIA_PE_DT_FP32 || out == in) : index_out;
      break;
    case MTIA_PE_RE_SUMSQ:
      ok = is_float(in) && (out == MTIA_PE_DT_FP32 || out == in);
      break;
    case MTIA_PE_RE_MAX:
    case MTIA_PE_RE_MIN:
      ok = out == in;
      break;
    default:
      ok = index_out;
      break;  // ARGMAX, ARGMIN
  }
  if (!ok) {
    return fail(ErrorCode::kBadElementSize, fmt::format("RE op {} cannot reduce {} into {}", d.op,
                                                        dtype_name(in), dtype_name(out)));
  }
  const bool arg = d.op == MTIA_PE_RE_ARGMAX || d.op == MTIA_PE_RE_ARGMIN;
  if (arg && (d.hdr.flags & MTIA_PE_RE_ACCUMULATE) != 0) {
    return fail(ErrorCode::kUnsupported,
                "RE argmax/argmin cannot accumulate: the running values are not kept");
  }
  if (d.axis > 1) return fail(ErrorCode::kBadDims, fmt::format("RE axis {} is not 0 or 1", d.axis));
  if (d.rows == 0 || d.cols == 0 || d.ld_src < d.cols) {
    return fail(ErrorCode::kBadDims,
                fmt::format("RE tile {} x {} with ld_src {}: sizes must be >= 1 and ld_src >= "
                            "cols",
                            d.rows, d.cols, d.ld_src));
  }
  const unsigned ie = dtype_bytes(in);
  const unsigned oe = dtype_bytes(out);
  const u128 src_bytes = tile_bytes(d.rows, d.cols, d.ld_src, ie);
  const u128 dst_bytes = u128{d.axis == 1 ? d.rows : d.cols} * oe;
  if (Check c = check_local("RE source", d.src, src_bytes, ie, ls_bytes); !c) return c;
  if (Check c = check_local("RE destination", d.dst, dst_bytes, oe, ls_bytes); !c) return c;
  if (overlaps(d.src, src_bytes, d.dst, dst_bytes)) {
    return fail(ErrorCode::kUnsupported, "RE source and destination overlap");
  }
  return {};
}

Check validate(const mtia_pe_mlu_desc& d, uint64_t ls_bytes) {
  if (Check c = check_header(d.hdr, MTIA_PE_DESC_MLU, 0); !c) return c;
  if (Check c = reserved_zero("MLU descriptor reserved0", d.reserved0); !c) return c;
  if (Check c = reserved_zero("MLU descriptor reserved1", d.reserved1); !c) return c;
  if (d.op != MTIA_PE_MLU_COPY && d.op != MTIA_PE_MLU_TRANSPOSE) {
    return fail(ErrorCode::kBadOpcode, fmt::format("MLU op {} is not defined", d.op));
  }
  if (!valid_elem_size(d.elem_size)) {
    return fail(ErrorCode::kBadElementSize,
                fmt::format("MLU elem_size {} is not 1, 2, 4 or 8", d.elem_size));
  }
  const bool tr = d.op == MTIA_PE_MLU_TRANSPOSE;
  const uint32_t dst_rows = tr ? d.cols : d.rows;
  const uint32_t dst_cols = tr ? d.rows : d.cols;
  if (d.rows == 0 || d.cols == 0 || d.ld_src < d.cols || d.ld_dst < dst_cols) {
    return fail(ErrorCode::kBadDims,
                fmt::format("MLU tile {} x {} with ld_src {} ld_dst {}: sizes must be >= 1 and "
                            "each leading dimension at least its row length",
                            d.rows, d.cols, d.ld_src, d.ld_dst));
  }
  const u128 src_bytes = tile_bytes(d.rows, d.cols, d.ld_src, d.elem_size);
  const u128 dst_bytes = tile_bytes(dst_rows, dst_cols, d.ld_dst, d.elem_size);
  if (Check c = check_local("MLU source", d.src, src_bytes, d.elem_size, ls_bytes); !c) return c;
  if (Check c = check_local("MLU destination", d.dst, dst_bytes, d.elem_size, ls_bytes); !c)
    return c;
  if (overlaps(d.src, src_bytes, d.dst, dst_bytes)) {
    return fail(ErrorCode::kUnsupported, "MLU source and destination overlap");
  }
  return {};
}

isa::Status detail::read_descriptor_bytes(const RiscvCore& core, uint64_t addr, void* dst,
                                          size_t bytes) {
  if (addr % 8 != 0) {
    return fail(ErrorCode::kMisaligned,
                fmt::format("descriptor address {:#x} is not 8-byte aligned", addr));
  }
  if (!core.read_memory(addr, {static_cast<uint8_t*>(dst), bytes})) {
    return fail(ErrorCode::kDeviceAddressFault,
                fmt::format("descriptor [{:#x}, +{} bytes) is not in the core's mapped memory",
                            addr, bytes));
  }
  return {};
}

}  // namespace mtia::sim::pe
