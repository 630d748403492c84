/* pe_ops.h is shared with kernels written in C: prove that it is valid C99 with the host
 * compiler too (its own static asserts check the layouts in both languages). */
#include "mtia/isa/pe/pe_ops.h"

/* Called from the C++ tests so the translation unit is linked, not just compiled. */
unsigned long pe_ops_c99_descriptor_bytes(void) {
  return sizeof(mtia_pe_dma_desc) + sizeof(mtia_pe_matmul_desc) + sizeof(mtia_pe_se_desc) +
         sizeof(mtia_pe_re_desc) + sizeof(mtia_pe_mlu_desc);
}
