/* The toolchain smoke kernel: out[i] = in[i] + 1 over int32 vectors, split across the PEs of
 * the launch. It proves that C compiled by clang reaches every kind of unit instruction the
 * core must hand to the units: pe.info, dma.start, se.op, pe.wait, pe.barrier. */
#include <stdint.h>

#include "mtia_kernel.h"

struct smoke_args {
  uint64_t in;  /* device address of n int32 values */
  uint64_t out; /* device address of n int32 values */
  uint32_t n;
  uint32_t reserved;
};

#define SMOKE_CHUNK 256 /* elements per PE per step */

static int32_t buf_in[SMOKE_CHUNK] MTIA_LOCAL;
static int32_t buf_out[SMOKE_CHUNK] MTIA_LOCAL;

int mtia_kernel_main(const struct smoke_args* args, uint64_t args_bytes) {
  if (args_bytes < sizeof(struct smoke_args)) return 1;
  const uint64_t pe = mtia_pe_id();
  const uint64_t pes = mtia_num_pes();
  /* Each PE takes every pes-th chunk. */
  for (uint64_t start = pe * SMOKE_CHUNK; start < args->n; start += pes * SMOKE_CHUNK) {
    uint32_t count = args->n - start < SMOKE_CHUNK ? (uint32_t)(args->n - start) : SMOKE_CHUNK;
    mtia_wait(mtia_dma_in(buf_in, args->in + start * 4, count * 4ull));
    mtia_wait(mtia_se_binary_imm(MTIA_PE_SE_ADD, MTIA_PE_DT_INT32, buf_out, buf_in, mtia_imm_i32(1),
                                 count));
    mtia_wait(mtia_dma_out(args->out + start * 4, buf_out, count * 4ull));
  }
  mtia_barrier();
  return 0;
}
