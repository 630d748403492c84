/* out[i] = in[i] + 2 on int32, on the PE's scalar core: each PE takes every pes-th chunk. */
#include <stdint.h>

#include "mtia_kernel.h"

#define CHUNK 128

static int32_t buf[CHUNK] MTIA_LOCAL;

struct addtwo_args {
  uint64_t out, in; /* device addresses of n int32 */
  int64_t n;
};

MTIA_KERNEL(addtwo, "out:ptr in:ptr n:i64");
int addtwo(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct addtwo_args, A);
  if (A->n < 0) return MTIA_KSTATUS_BAD_SHAPE;
  const uint64_t n = (uint64_t)A->n, pes = mtia_num_pes();
  for (uint64_t start = mtia_pe_id() * CHUNK; start < n; start += pes * CHUNK) {
    const uint32_t count = n - start < CHUNK ? (uint32_t)(n - start) : CHUNK;
    mtia_wait(mtia_dma_in(buf, A->in + start * 4, count * 4ull));
    for (uint32_t i = 0; i < count; ++i) buf[i] += 2;
    mtia_wait(mtia_dma_out(A->out + start * 4, buf, count * 4ull));
  }
  return MTIA_KSTATUS_OK;
}
