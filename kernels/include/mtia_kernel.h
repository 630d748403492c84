/* Intrinsics for MTIA kernel authors: C wrappers around the PE unit instructions.
 *
 * A kernel is a C function `int mtia_kernel_main(const void* args, uint64_t args_bytes)`
 * linked with kernels/src/crt0.S and kernels/link.ld; it returns its exit status (0 = ok).
 * The control core is RV64IM without an FPU: floating-point math belongs to the units, and
 * float constants reach them as bit patterns (mtia_imm_f32). Local-store buffers are globals
 * placed with MTIA_LOCAL; the stack is at the top of the local store.
 *
 * Every unit instruction returns a tag; an operation's outputs may be read, and its inputs
 * overwritten, only after mtia_wait(tag) (or mtia_wait_all) returns. Descriptors are read at
 * issue, so they may live on the stack. See docs/pe-isa.md.
 */
#ifndef MTIA_KERNEL_H_
#define MTIA_KERNEL_H_

#include <stdint.h>

#include "mtia/isa/pe/kernel_meta.h"
#include "mtia/isa/pe/pe_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MTIA_STR_(x) #x
#define MTIA_STR(x) MTIA_STR_(x)

/* Every function of this header is a wrapper that is always inlined, with no debug information
 * of its own: its instructions take the caller's source line, which is the line a sanitizer
 * report or a PE fault should name ("dma.start at pc 0x10abc (src/my_kernel.c:42)"). */
#if defined(__clang__)
#define MTIA_INTRINSIC_ static inline __attribute__((always_inline, nodebug))
#else
#define MTIA_INTRINSIC_ static inline
#endif

/* Places a global in this PE's local store (zero at launch). */
#define MTIA_LOCAL __attribute__((section(".lstore"), aligned(64)))

typedef uint64_t mtia_tag_t;

/* Zeroes a descriptor (reserved fields must be zero); valid C99 and C++ alike. Descriptors
 * (and structs holding a uint64_t) are whole 8-byte words: inline word stores take a fraction
 * of the instructions of a call to the byte-generic memset, and the empty asm keeps the
 * compiler from turning the loop back into that call. */
#define MTIA_ZERO_(x)                                                \
  do {                                                               \
    uint64_t* mtia_w_ = (uint64_t*)&(x);                             \
    for (unsigned mtia_i_ = 0; mtia_i_ < sizeof(x) / 8; ++mtia_i_) { \
      __asm__("" : "+r"(mtia_w_));                                   \
      mtia_w_[mtia_i_] = 0;                                          \
    }                                                                \
  } while (0)

/* The assembler text of an instruction up to its register operands:
 * ".insn r opcode, funct3, funct7, " (clang 14 and later accept .insn r). */
#define MTIA_INSN_(opc, f3, f7) ".insn r " MTIA_STR(opc) ", " MTIA_STR(f3) ", " MTIA_STR(f7) ", "
#define MTIA_CTRL_(f3, f7) MTIA_INSN_(MTIA_PE_OPC_CTRL, f3, f7)

/* ---- PE information (pe.info): answered by the core, costs one ALU cycle ----------------- */
#define MTIA_DEFINE_INFO_(name, field)                                  \
  MTIA_INTRINSIC_ uint64_t name(void) {                                 \
    uint64_t v;                                                         \
    __asm__(MTIA_CTRL_(MTIA_PE_F3_INFO, field) "%0, x0, x0" : "=r"(v)); \
    return v;                                                           \
  }
MTIA_DEFINE_INFO_(mtia_pe_id, MTIA_PE_INFO_PE_ID)
MTIA_DEFINE_INFO_(mtia_grid_rows, MTIA_PE_INFO_GRID_ROWS)
MTIA_DEFINE_INFO_(mtia_grid_cols, MTIA_PE_INFO_GRID_COLS)
MTIA_DEFINE_INFO_(mtia_pe_row, MTIA_PE_INFO_PE_ROW)
MTIA_DEFINE_INFO_(mtia_pe_col, MTIA_PE_INFO_PE_COL)
MTIA_DEFINE_INFO_(mtia_num_pes, MTIA_PE_INFO_NUM_PES)
MTIA_DEFINE_INFO_(mtia_args_ptr, MTIA_PE_INFO_ARGS_PTR)
MTIA_DEFINE_INFO_(mtia_args_bytes, MTIA_PE_INFO_ARGS_BYTES)
MTIA_DEFINE_INFO_(mtia_ls_base, MTIA_PE_INFO_LS_BASE)
MTIA_DEFINE_INFO_(mtia_ls_bytes, MTIA_PE_INFO_LS_BYTES)
MTIA_DEFINE_INFO_(mtia_sram_base, MTIA_PE_INFO_SRAM_BASE)
MTIA_DEFINE_INFO_(mtia_sram_bytes, MTIA_PE_INFO_SRAM_BYTES)
#undef MTIA_DEFINE_INFO_

/* The counters change on every read, so these are volatile. */
MTIA_INTRINSIC_ uint64_t mtia_cycles(void) {
  uint64_t v;
  __asm__ volatile(MTIA_CTRL_(MTIA_PE_F3_INFO, MTIA_PE_INFO_CYCLES) "%0, x0, x0" : "=r"(v));
  return v;
}
MTIA_INTRINSIC_ uint64_t mtia_instret(void) {
  uint64_t v;
  __asm__ volatile(MTIA_CTRL_(MTIA_PE_F3_INFO, MTIA_PE_INFO_INSTRET) "%0, x0, x0" : "=r"(v));
  return v;
}

/* ---- Synchronisation ----------------------------------------------------------------------
 * The "memory" clobbers keep the compiler from moving local-store accesses across them. */

/* Waits until every PE of the launch has reached its barrier. */
MTIA_INTRINSIC_ void mtia_barrier(void) {
  __asm__ volatile(MTIA_CTRL_(MTIA_PE_F3_BARRIER, MTIA_PE_F7_V1) "x0, x0, x0" ::: "memory");
}

/* Waits until the operation with this tag has completed; tag 0 is always complete. */
MTIA_INTRINSIC_ void mtia_wait(mtia_tag_t tag) {
  __asm__ volatile(MTIA_CTRL_(MTIA_PE_F3_WAIT, MTIA_PE_F7_V1) "x0, %0, x0" ::"r"(tag) : "memory");
}

/* Waits until every operation this PE issued has completed. */
MTIA_INTRINSIC_ void mtia_wait_all(void) {
  __asm__ volatile(MTIA_CTRL_(MTIA_PE_F3_WAIT_ALL, MTIA_PE_F7_V1) "x0, x0, x0" ::: "memory");
}

/* 1 if the operation with this tag has completed, else 0. Does not wait. */
MTIA_INTRINSIC_ int mtia_poll(mtia_tag_t tag) {
  uint64_t done;
  __asm__ volatile(MTIA_CTRL_(MTIA_PE_F3_POLL, MTIA_PE_F7_V1) "%0, %1, x0"
                   : "=r"(done)
                   : "r"(tag)
                   : "memory");
  return (int)done;
}

/* ---- Issuing unit operations: rs1 = descriptor address, rd = tag ------------------------- */
#define MTIA_ISSUE_(opc, f3, desc)                                 \
  mtia_tag_t tag;                                                  \
  __asm__ volatile(MTIA_INSN_(opc, f3, MTIA_PE_F7_V1) "%0, %1, x0" \
                   : "=r"(tag)                                     \
                   : "r"(desc)                                     \
                   : "memory");                                    \
  return tag

MTIA_INTRINSIC_ mtia_tag_t mtia_dma_start(const mtia_pe_dma_desc* d) {
  MTIA_ISSUE_(MTIA_PE_OPC_DMA, MTIA_PE_F3_DMA, d);
}
MTIA_INTRINSIC_ mtia_tag_t mtia_dpe_matmul(const mtia_pe_matmul_desc* d) {
  MTIA_ISSUE_(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_MATMUL, d);
}
MTIA_INTRINSIC_ mtia_tag_t mtia_se_op(const mtia_pe_se_desc* d) {
  MTIA_ISSUE_(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_SE, d);
}
MTIA_INTRINSIC_ mtia_tag_t mtia_re_reduce(const mtia_pe_re_desc* d) {
  MTIA_ISSUE_(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_RE, d);
}
MTIA_INTRINSIC_ mtia_tag_t mtia_mlu_op(const mtia_pe_mlu_desc* d) {
  MTIA_ISSUE_(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_MLU, d);
}
#undef MTIA_ISSUE_

/* Ends the kernel on this PE with an exit status (0 = success). */
MTIA_INTRINSIC_ __attribute__((noreturn)) void mtia_exit(int64_t status) {
  register int64_t a0 __asm__("a0") = status;
  __asm__ volatile("ecall" ::"r"(a0) : "memory");
  __builtin_unreachable();
}

/* ---- Helpers that build a descriptor and issue it ---------------------------------------- */

/* Struct initialisation may compile to memset/memcpy calls: kernels/src/rt.c provides them. */
MTIA_INTRINSIC_ mtia_pe_desc_header mtia_desc_header(uint8_t kind, uint16_t flags) {
  mtia_pe_desc_header h;
  h.version = MTIA_PE_DESC_VERSION;
  h.kind = kind;
  h.flags = flags;
  h.reserved = 0;
  return h;
}

/* Contiguous copy of `bytes` bytes between two spaces, in the widest elements that the
 * addresses and the length allow (8-byte aligned copies are fastest). */
MTIA_INTRINSIC_ mtia_tag_t mtia_dma_1d(uint64_t dst, uint8_t dst_space, uint64_t src,
                                       uint8_t src_space, uint64_t bytes) {
  mtia_pe_dma_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_DMA, 0);
  d.ndims = 1;
  uint64_t all = bytes | src | dst;
  d.elem_size = (all % 8 == 0) ? 8 : (all % 4 == 0) ? 4 : (all % 2 == 0) ? 2 : 1;
  d.src_space = src_space;
  d.dst_space = dst_space;
  d.src = src;
  d.dst = dst;
  d.sizes[0] = bytes / d.elem_size;
  d.src_strides[0] = d.elem_size;
  d.dst_strides[0] = d.elem_size;
  return mtia_dma_start(&d);
}

/* DRAM/SRAM (device address) -> local store, and back. */
MTIA_INTRINSIC_ mtia_tag_t mtia_dma_in(void* local_dst, uint64_t device_src, uint64_t bytes) {
  return mtia_dma_1d((uint64_t)(uintptr_t)local_dst, MTIA_PE_SPACE_LOCAL, device_src,
                     MTIA_PE_SPACE_DEVICE, bytes);
}
MTIA_INTRINSIC_ mtia_tag_t mtia_dma_out(uint64_t device_dst, const void* local_src,
                                        uint64_t bytes) {
  return mtia_dma_1d(device_dst, MTIA_PE_SPACE_DEVICE, (uint64_t)(uintptr_t)local_src,
                     MTIA_PE_SPACE_LOCAL, bytes);
}

/* Immediate operands: the value's bit pattern in the low bytes (see MTIA_PE_OPND_IMMEDIATE). */
MTIA_INTRINSIC_ uint64_t mtia_imm_f32(float v) {
  union {
    float f;
    uint32_t u;
  } x;
  x.f = v;
  return x.u;
}
MTIA_INTRINSIC_ uint64_t mtia_imm_i32(int32_t v) {
  return (uint32_t)v;
}
MTIA_INTRINSIC_ uint64_t mtia_imm_i64(int64_t v) {
  return (uint64_t)v;
}

/* out = op(a, b) over n elements of one dtype (comparisons: pass out_dtype MTIA_PE_DT_BOOL). */
MTIA_INTRINSIC_ mtia_tag_t mtia_se_binary(uint8_t op, uint8_t in_dtype, uint8_t out_dtype,
                                          void* out, const void* a, const void* b, uint32_t n) {
  mtia_pe_se_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
  d.op = op;
  d.in_dtype = in_dtype;
  d.out_dtype = out_dtype;
  d.count = n;
  d.src[0] = (uint64_t)(uintptr_t)a;
  d.src[1] = (uint64_t)(uintptr_t)b;
  d.dst = (uint64_t)(uintptr_t)out;
  return mtia_se_op(&d);
}

/* out = op(a, imm) over n elements: imm is a bit pattern from mtia_imm_*. */
MTIA_INTRINSIC_ mtia_tag_t mtia_se_binary_imm(uint8_t op, uint8_t dtype, void* out, const void* a,
                                              uint64_t imm, uint32_t n) {
  mtia_pe_se_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
  d.op = op;
  d.in_dtype = dtype;
  d.out_dtype = dtype;
  d.count = n;
  d.mode[1] = MTIA_PE_OPND_IMMEDIATE;
  d.src[0] = (uint64_t)(uintptr_t)a;
  d.imm[1] = imm;
  d.dst = (uint64_t)(uintptr_t)out;
  return mtia_se_op(&d);
}

/* out = op(a) over n elements (unary ops and casts). */
MTIA_INTRINSIC_ mtia_tag_t mtia_se_unary(uint8_t op, uint8_t in_dtype, uint8_t out_dtype, void* out,
                                         const void* a, uint32_t n) {
  mtia_pe_se_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_SE, 0);
  d.op = op;
  d.in_dtype = in_dtype;
  d.out_dtype = out_dtype;
  d.count = n;
  d.src[0] = (uint64_t)(uintptr_t)a;
  d.dst = (uint64_t)(uintptr_t)out;
  return mtia_se_op(&d);
}

/* C[m x n] (+)= A[m x k] * B[k x n], row-major tiles with leading dimensions. */
MTIA_INTRINSIC_ mtia_tag_t mtia_matmul(uint8_t in_dtype, uint8_t out_dtype, uint16_t flags, void* c,
                                       uint32_t ldc, const void* a, uint32_t lda, const void* b,
                                       uint32_t ldb, uint32_t m, uint32_t n, uint32_t k) {
  mtia_pe_matmul_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_MATMUL, flags);
  d.in_dtype = in_dtype;
  d.out_dtype = out_dtype;
  d.m = m;
  d.n = n;
  d.k = k;
  d.lda = lda;
  d.ldb = ldb;
  d.ldc = ldc;
  d.a = (uint64_t)(uintptr_t)a;
  d.b = (uint64_t)(uintptr_t)b;
  d.c = (uint64_t)(uintptr_t)c;
  return mtia_dpe_matmul(&d);
}

/* Reduces a rows x cols tile along `axis` (1: one result per row, 0: one per column). */
MTIA_INTRINSIC_ mtia_tag_t mtia_reduce(uint8_t op, uint8_t in_dtype, uint8_t out_dtype,
                                       uint8_t axis, uint16_t flags, void* dst, const void* src,
                                       uint32_t rows, uint32_t cols, uint32_t ld_src) {
  mtia_pe_re_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_RE, flags);
  d.op = op;
  d.in_dtype = in_dtype;
  d.out_dtype = out_dtype;
  d.axis = axis;
  d.rows = rows;
  d.cols = cols;
  d.ld_src = ld_src;
  d.src = (uint64_t)(uintptr_t)src;
  d.dst = (uint64_t)(uintptr_t)dst;
  return mtia_re_reduce(&d);
}

/* dst = transpose(src) for a rows x cols tile of elem_size-byte elements. */
MTIA_INTRINSIC_ mtia_tag_t mtia_transpose(uint8_t elem_size, void* dst, uint32_t ld_dst,
                                          const void* src, uint32_t ld_src, uint32_t rows,
                                          uint32_t cols) {
  mtia_pe_mlu_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_MLU, 0);
  d.op = MTIA_PE_MLU_TRANSPOSE;
  d.elem_size = elem_size;
  d.rows = rows;
  d.cols = cols;
  d.ld_src = ld_src;
  d.ld_dst = ld_dst;
  d.src = (uint64_t)(uintptr_t)src;
  d.dst = (uint64_t)(uintptr_t)dst;
  return mtia_mlu_op(&d);
}

/* ---- Kernel modules: entry points with metadata --------------------------------------------
 * MTIA_KERNEL(fn, "out:ptr n:i64 ...") declares `int fn(const uint64_t* args, uint64_t
 * args_bytes)` as a kernel of the module this file is linked into:
 *   - an entry trampoline `mtia_entry_<fn>` that calls fn and ECALLs with its return value
 *     (the PE starts there: launch state as in docs/pe-isa.md, a0 = args, a1 = bytes);
 *   - a mtia_kernel_meta record in section .mtia.meta with the name, the trampoline's address
 *     and the signature (grammar in mtia/isa/pe/kernel_meta.h: one 8-byte slot per argument).
 * Define fn after the macro. The signature is what the host checks a launch against; the
 * kernel still checks args_bytes itself (MTIA_KERNEL_ARGS). */
/* clang-format off */
#define MTIA_KERNEL(fn, signature)                                                             \
  int fn(const uint64_t* args, uint64_t args_bytes);                                           \
  __asm__(".pushsection .text.mtia_entry." #fn ",\"ax\",@progbits\n"                           \
          ".globl mtia_entry_" #fn "\n"                                                        \
          ".p2align 2\n"                                                                       \
          ".type mtia_entry_" #fn ", @function\n"                                              \
          "mtia_entry_" #fn ":\n"                                                              \
          "  call " #fn "\n"                                                                   \
          "  ecall\n"                                                                          \
          ".size mtia_entry_" #fn ", . - mtia_entry_" #fn "\n"                                 \
          ".popsection\n");                                                                    \
  extern const char mtia_entry_##fn[];                                                         \
  MTIA_PE_STATIC_ASSERT(sizeof(#fn) <= MTIA_KMETA_NAME_BYTES, kernel_name_fits_##fn);          \
  MTIA_PE_STATIC_ASSERT(sizeof(signature) <= MTIA_KMETA_SIGNATURE_BYTES, kernel_sig_fits_##fn); \
  __attribute__((section(MTIA_KMETA_SECTION), used, aligned(8)))                               \
  static const mtia_kernel_meta mtia_meta_##fn = {                                             \
      MTIA_KMETA_MAGIC, MTIA_KMETA_VERSION, (uint16_t)sizeof(mtia_kernel_meta),                \
      0 /* flags */, 0 /* reserved0 */, (uint64_t)(uintptr_t)mtia_entry_##fn,                  \
      {0, 0} /* reserved1 */, #fn, signature}
/* clang-format on */

/* In a kernel: the argument block as `const type* name`, or exit status
 * MTIA_KSTATUS_BAD_ARG_BYTES when the block does not have exactly sizeof(type) bytes. `type`
 * is a struct of 8-byte fields in signature order. */
#define MTIA_KERNEL_ARGS(type, name)                                 \
  if (args_bytes != sizeof(type)) return MTIA_KSTATUS_BAD_ARG_BYTES; \
  const type* name = (const type*)(const void*)args

#ifdef __cplusplus
}
#endif

#endif /* MTIA_KERNEL_H_ */
