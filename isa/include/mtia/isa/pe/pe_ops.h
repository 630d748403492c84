/* The PE instruction-set extension: how a PE's RV64IM control core drives its units.
 *
 * Shared by the kernels (C99, compiled for riscv64 by clang) and the simulator (C++20), so
 * this header is plain C: macros, enums and fixed-width structs. docs/pe-isa.md is the full
 * specification; the comments here are the summary.
 *
 * Every unit instruction is an R-type instruction in a RISC-V custom opcode space:
 *
 *   31      25 24  20 19  15 14  12 11   7 6      0
 *   | funct7  |  rs2 |  rs1 |funct3|  rd  | opcode |
 *
 * N-D operands do not fit in registers, so the unit instructions name a descriptor struct
 * in the core's memory through rs1 and return a completion tag in rd. The descriptor is
 * read when the instruction issues: the kernel may reuse its memory right after. Register
 * fields listed as x0 below must be x0; anything else is an illegal instruction.
 *
 *   mnemonic     opcode        funct3 funct7  rd        rs1        rs2
 *   pe.info      custom-0 0x0B   0    field   value     x0         x0
 *   pe.barrier   custom-0 0x0B   1    0       0         x0         x0
 *   pe.wait      custom-0 0x0B   2    0       0         tag        x0
 *   pe.waitall   custom-0 0x0B   3    0       0         x0         x0
 *   pe.poll      custom-0 0x0B   4    0       1 if done tag        x0
 *   dma.start    custom-1 0x2B   0    0       tag       &dma_desc  x0
 *   dpe.matmul   custom-2 0x5B   0    0       tag       &mm_desc   x0
 *   se.op        custom-2 0x5B   1    0       tag       &se_desc   x0
 *   re.reduce    custom-2 0x5B   2    0       tag       &re_desc   x0
 *   mlu.op       custom-2 0x5B   3    0       tag       &mlu_desc  x0
 *   (custom-3 0x7B is reserved: every encoding in it is illegal.)
 *
 * All structs are little-endian with natural alignment; descriptors must be 8-byte aligned.
 * Every descriptor starts with mtia_pe_desc_header; reserved fields must be zero.
 */
#ifndef MTIA_ISA_PE_PE_OPS_H_
#define MTIA_ISA_PE_PE_OPS_H_

#include <stddef.h>
#include <stdint.h>

#include "se_ops.h"

#ifdef __cplusplus
#define MTIA_PE_STATIC_ASSERT(cond, name) static_assert(cond, #name)
#else
/* C99 has no _Static_assert: a negative array size stops the build instead. */
#define MTIA_PE_STATIC_ASSERT(cond, name) typedef char mtia_pe_static_assert_##name[(cond) ? 1 : -1]
#endif

/* ---- The core's address space (core-local addresses, the same on every PE) ---------------
 * The core's loads and stores reach only these windows; device memory (DRAM, SRAM, other
 * PEs) is reached through dma.start. Anything else is an access fault. */
#define MTIA_PE_IMAGE_BASE 0x00010000ull      /* kernel image: text, rodata, data, bss */
#define MTIA_PE_IMAGE_MAX_BYTES 0x00100000ull /* 1 MiB */
#define MTIA_PE_ARGS_BASE 0x00200000ull       /* launch argument block, read-only */
#define MTIA_PE_ARGS_MAX_BYTES 0x00001000ull  /* 4 KiB */
#define MTIA_PE_LS_BASE 0x10000000ull         /* this PE's local store */
#define MTIA_PE_LS_MAX_BYTES 0x00100000ull    /* 1 MiB window; the preset sets the size used */

/* ---- Opcodes and function codes --------------------------------------------------------- */
#define MTIA_PE_OPC_CTRL 0x0B     /* custom-0: PE control */
#define MTIA_PE_OPC_DMA 0x2B      /* custom-1: local DMA */
#define MTIA_PE_OPC_COMPUTE 0x5B  /* custom-2: DPE, SE, RE, MLU */
#define MTIA_PE_OPC_RESERVED 0x7B /* custom-3: reserved */

#define MTIA_PE_F3_INFO 0
#define MTIA_PE_F3_BARRIER 1
#define MTIA_PE_F3_WAIT 2
#define MTIA_PE_F3_WAIT_ALL 3
#define MTIA_PE_F3_POLL 4

#define MTIA_PE_F3_DMA 0

#define MTIA_PE_F3_MATMUL 0
#define MTIA_PE_F3_SE 1
#define MTIA_PE_F3_RE 2
#define MTIA_PE_F3_MLU 3

/* funct7 of every instruction except pe.info; other values are reserved (illegal). */
#define MTIA_PE_F7_V1 0

/* pe.info fields, selected by funct7. The core answers these itself (no unit involved). */
#define MTIA_PE_INFO_PE_ID 0       /* this PE's index in the launch: pe_row * grid_cols + pe_col */
#define MTIA_PE_INFO_GRID_ROWS 1   /* PE rows in the launch, 1..8 */
#define MTIA_PE_INFO_GRID_COLS 2   /* PE columns in the launch, 1..8 */
#define MTIA_PE_INFO_PE_ROW 3      /* this PE's row in the launch grid */
#define MTIA_PE_INFO_PE_COL 4      /* this PE's column in the launch grid */
#define MTIA_PE_INFO_NUM_PES 5     /* grid_rows * grid_cols */
#define MTIA_PE_INFO_ARGS_PTR 6    /* core address of the argument block (MTIA_PE_ARGS_BASE) */
#define MTIA_PE_INFO_ARGS_BYTES 7  /* size of the argument block in bytes */
#define MTIA_PE_INFO_LS_BASE 8     /* MTIA_PE_LS_BASE */
#define MTIA_PE_INFO_LS_BYTES 9    /* local-store bytes of this chip preset */
#define MTIA_PE_INFO_CYCLES 10     /* core cycles since the launch started on this PE */
#define MTIA_PE_INFO_INSTRET 11    /* instructions retired since the launch started */
#define MTIA_PE_INFO_SRAM_BASE 12  /* device address of the on-chip SRAM (launch scratch) */
#define MTIA_PE_INFO_SRAM_BYTES 13 /* on-chip SRAM bytes of this chip preset */
#define MTIA_PE_INFO_COUNT 14

/* ---- Descriptors -------------------------------------------------------------------------- */
#define MTIA_PE_DESC_VERSION 1

/* Which descriptor a struct is; checked against the instruction that names it. */
enum mtia_pe_desc_kind {
  MTIA_PE_DESC_INVALID = 0, /* a zeroed descriptor is never valid */
  MTIA_PE_DESC_DMA = 1,
  MTIA_PE_DESC_MATMUL = 2,
  MTIA_PE_DESC_SE = 3,
  MTIA_PE_DESC_RE = 4,
  MTIA_PE_DESC_MLU = 5,
  MTIA_PE_DESC_KIND_COUNT
};

typedef struct mtia_pe_desc_header {
  uint8_t version;   /* MTIA_PE_DESC_VERSION */
  uint8_t kind;      /* enum mtia_pe_desc_kind */
  uint16_t flags;    /* per-descriptor flag bits; undefined bits must be zero */
  uint32_t reserved; /* must be zero */
} mtia_pe_desc_header;
MTIA_PE_STATIC_ASSERT(sizeof(mtia_pe_desc_header) == 8, desc_header_size);

/* Element types of the units. Floating types are IEEE binary32 / binary16 and bfloat16; bool
 * is one byte holding 0 or 1. */
enum mtia_pe_dtype {
  MTIA_PE_DT_INVALID = 0,
  MTIA_PE_DT_FP32 = 1,
  MTIA_PE_DT_FP16 = 2,
  MTIA_PE_DT_BF16 = 3,
  MTIA_PE_DT_INT8 = 4,
  MTIA_PE_DT_INT32 = 5,
  MTIA_PE_DT_INT64 = 6,
  MTIA_PE_DT_BOOL = 7,
  MTIA_PE_DT_COUNT
};

/* -- Local DMA: an N-D copy, sizes[0] x ... x sizes[ndims-1] elements, dimension 0 outermost. */
#define MTIA_PE_DMA_MAX_DIMS 4

enum mtia_pe_space {
  MTIA_PE_SPACE_LOCAL = 0,  /* a core address inside this PE's local-store window */
  MTIA_PE_SPACE_DEVICE = 1, /* a device physical address (DRAM, SRAM; see address_map.h) */
  MTIA_PE_SPACE_COUNT
};

typedef struct mtia_pe_dma_desc {
  mtia_pe_desc_header hdr; /* kind MTIA_PE_DESC_DMA, flags 0 */
  uint8_t ndims;           /* 1..MTIA_PE_DMA_MAX_DIMS */
  uint8_t elem_size;       /* 1, 2, 4 or 8 bytes */
  uint8_t src_space;       /* enum mtia_pe_space */
  uint8_t dst_space;       /* enum mtia_pe_space */
  uint32_t reserved0;
  uint64_t src;
  uint64_t dst;
  uint64_t sizes[MTIA_PE_DMA_MAX_DIMS];       /* elements per dimension, >= 1; unused zero */
  uint64_t src_strides[MTIA_PE_DMA_MAX_DIMS]; /* bytes; 0 repeats (broadcast); unused zero */
  uint64_t dst_strides[MTIA_PE_DMA_MAX_DIMS]; /* bytes; unused zero */
} mtia_pe_dma_desc;
MTIA_PE_STATIC_ASSERT(sizeof(mtia_pe_dma_desc) == 128, dma_desc_size);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_dma_desc, sizes) == 32, dma_desc_sizes_offset);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_dma_desc, dst_strides) == 96, dma_desc_dst_strides_offset);

/* -- DPE: C[M x N] (+)= A[M x K] * B[K x N] on local-store tiles, row-major with leading
 *    dimensions in elements. in_dtype/out_dtype pairs: int8->int32, fp16->fp32, bf16->fp32,
 *    fp32->fp32. */
#define MTIA_PE_MM_ACCUMULATE (1u << 0) /* C += A*B; without it C = A*B */
#define MTIA_PE_MM_TRANS_A (1u << 1)    /* A is stored K x M: element (i,k) at a[k*lda + i] */
#define MTIA_PE_MM_TRANS_B (1u << 2)    /* B is stored N x K: element (k,j) at b[j*ldb + k] */
#define MTIA_PE_MM_FLAGS_MASK 0x7u

typedef struct mtia_pe_matmul_desc {
  mtia_pe_desc_header hdr; /* kind MTIA_PE_DESC_MATMUL, flags MTIA_PE_MM_* */
  uint8_t in_dtype;        /* dtype of A and B */
  uint8_t out_dtype;       /* dtype of C */
  uint16_t reserved0;
  uint32_t reserved1;
  uint32_t m, n, k;       /* each >= 1 */
  uint32_t lda, ldb, ldc; /* leading dimensions in elements */
  uint64_t a, b, c;       /* local-store addresses, aligned to their element size */
} mtia_pe_matmul_desc;
MTIA_PE_STATIC_ASSERT(sizeof(mtia_pe_matmul_desc) == 64, matmul_desc_size);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_matmul_desc, m) == 16, matmul_desc_m_offset);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_matmul_desc, a) == 40, matmul_desc_a_offset);

/* -- SE: out[i] = op(a[i], b[i], c[i]) for i < count. The ops, their operands and dtypes are
 *    the table of se_ops.h. */
enum mtia_pe_se_op {
  MTIA_PE_SE_INVALID = 0,
#define MTIA_PE_SE_ENUM(NAME_, code_, arity_, in_, out_, cost_, name_) MTIA_PE_SE_##NAME_ = code_,
  MTIA_PE_SE_OPS(MTIA_PE_SE_ENUM)
#undef MTIA_PE_SE_ENUM
      MTIA_PE_SE_OP_COUNT /* one past the highest code; the codes are 1..COUNT-1 */
};

/* How each of the operands a, b, c is supplied. */
enum mtia_pe_operand_mode {
  MTIA_PE_OPND_VECTOR = 0,    /* count elements at src[i] */
  MTIA_PE_OPND_BROADCAST = 1, /* one element at src[i], used for every lane */
  MTIA_PE_OPND_IMMEDIATE = 2, /* imm[i]: the value's bit pattern in the low bytes, rest zero */
  MTIA_PE_OPND_MODE_COUNT
};

typedef struct mtia_pe_se_desc {
  mtia_pe_desc_header hdr; /* kind MTIA_PE_DESC_SE, flags 0 */
  uint8_t op;              /* enum mtia_pe_se_op */
  uint8_t in_dtype;        /* dtype of the operands (SELECT: of b and c; a is bool) */
  uint8_t out_dtype;       /* dtype of out */
  uint8_t reserved0;
  uint32_t count;  /* elements, >= 1 */
  uint8_t mode[3]; /* enum mtia_pe_operand_mode of a, b, c; unused operands 0 */
  uint8_t reserved1[5];
  uint64_t src[3]; /* local-store addresses of a, b, c; unused or immediate: 0 */
  uint64_t imm[3]; /* immediate values of a, b, c; otherwise 0 */
  uint64_t dst;    /* local-store address of out */
} mtia_pe_se_desc;
MTIA_PE_STATIC_ASSERT(sizeof(mtia_pe_se_desc) == 80, se_desc_size);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_se_desc, mode) == 16, se_desc_mode_offset);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_se_desc, imm) == 48, se_desc_imm_offset);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_se_desc, dst) == 72, se_desc_dst_offset);

/* -- RE: reduce a rows x cols tile (row stride ld_src elements) along one axis into a
 *    contiguous vector: axis 1 gives rows results (one per row), axis 0 gives cols results. */
enum mtia_pe_re_op {
  MTIA_PE_RE_INVALID = 0,
  MTIA_PE_RE_SUM = 1,
  MTIA_PE_RE_MAX = 2,
  MTIA_PE_RE_MIN = 3,
  MTIA_PE_RE_SUMSQ = 4,  /* sum of squares (for variance and norms) */
  MTIA_PE_RE_ARGMAX = 5, /* index along the axis of the first maximum */
  MTIA_PE_RE_ARGMIN = 6,
  MTIA_PE_RE_OP_COUNT
};

/* Combine with what dst holds: SUM and SUMSQ add to it, MAX and MIN take the max/min. */
#define MTIA_PE_RE_ACCUMULATE (1u << 0)
#define MTIA_PE_RE_FLAGS_MASK 0x1u

typedef struct mtia_pe_re_desc {
  mtia_pe_desc_header hdr; /* kind MTIA_PE_DESC_RE, flags MTIA_PE_RE_* */
  uint8_t op;              /* enum mtia_pe_re_op */
  uint8_t in_dtype;
  uint8_t out_dtype;
  uint8_t axis; /* 0 or 1 */
  uint32_t reserved0;
  uint32_t rows, cols; /* each >= 1 */
  uint32_t ld_src;     /* elements between the starts of consecutive rows, >= cols */
  uint32_t reserved1;
  uint64_t src, dst; /* local-store addresses */
} mtia_pe_re_desc;
MTIA_PE_STATIC_ASSERT(sizeof(mtia_pe_re_desc) == 48, re_desc_size);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_re_desc, src) == 32, re_desc_src_offset);

/* -- MLU: copy or transpose a rows x cols tile of elem_size-byte elements. */
enum mtia_pe_mlu_op {
  MTIA_PE_MLU_INVALID = 0,
  MTIA_PE_MLU_COPY = 1,      /* dst[i*ld_dst + j] = src[i*ld_src + j] */
  MTIA_PE_MLU_TRANSPOSE = 2, /* dst[j*ld_dst + i] = src[i*ld_src + j] */
  MTIA_PE_MLU_OP_COUNT
};

typedef struct mtia_pe_mlu_desc {
  mtia_pe_desc_header hdr; /* kind MTIA_PE_DESC_MLU, flags 0 */
  uint8_t op;              /* enum mtia_pe_mlu_op */
  uint8_t elem_size;       /* 1, 2, 4 or 8 */
  uint16_t reserved0;
  uint32_t rows, cols;     /* of the source tile, each >= 1 */
  uint32_t ld_src, ld_dst; /* leading dimensions in elements */
  uint32_t reserved1;
  uint64_t src, dst; /* local-store addresses; the tiles must not overlap */
} mtia_pe_mlu_desc;
MTIA_PE_STATIC_ASSERT(sizeof(mtia_pe_mlu_desc) == 48, mlu_desc_size);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_mlu_desc, src) == 32, mlu_desc_src_offset);

#endif /* MTIA_ISA_PE_PE_OPS_H_ */
