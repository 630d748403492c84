/* pe_ops.h is shared with kernels written in C: prove it is valid C99 with the host compiler
 * too, and that the struct layouts match what docs/pe-isa.md states. */
#include "mtia/isa/pe/pe_ops.h"

MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_dma_desc, src) == 16, c99_dma_src);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_dma_desc, dst_strides) == 96, c99_dma_dst_strides);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_matmul_desc, m) == 16, c99_mm_m);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_matmul_desc, a) == 40, c99_mm_a);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_se_desc, count) == 12, c99_se_count);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_se_desc, mode) == 16, c99_se_mode);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_se_desc, src) == 24, c99_se_src);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_se_desc, imm) == 48, c99_se_imm);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_se_desc, dst) == 72, c99_se_dst);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_re_desc, rows) == 16, c99_re_rows);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_re_desc, src) == 32, c99_re_src);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_mlu_desc, rows) == 12, c99_mlu_rows);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_pe_mlu_desc, src) == 32, c99_mlu_src);

/* Called from the C++ tests so the translation unit is linked, not just compiled. */
unsigned long pe_ops_c99_descriptor_bytes(void) {
  return sizeof(mtia_pe_dma_desc) + sizeof(mtia_pe_matmul_desc) + sizeof(mtia_pe_se_desc) +
         sizeof(mtia_pe_re_desc) + sizeof(mtia_pe_mlu_desc);
}
