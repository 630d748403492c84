/* kernel_meta.h is included by kernels written in C: prove that its C part is valid C99 with
 * the host compiler too (its static asserts check the record layout in both languages). */
#include "mtia/isa/pe/kernel_meta.h"

/* Called from the C++ tests so the translation unit is linked, not just compiled. */
unsigned long kernel_meta_c99_record_bytes(void) {
  return sizeof(mtia_kernel_meta);
}
