/* A kernel module of two fp32 kernels, split across the PEs of the launch: each PE takes every
 * pes-th chunk of the vectors, copies it into its local store, computes with the SIMD engine
 * and copies the result back.
 *   vector_add: out[i] = a[i] + b[i]
 *   axpy:       out[i] = alpha * x[i] + y[i]  (rounded after the product and after the sum) */
#include <stdint.h>

#include "mtia_kernel.h"

#define CHUNK 256 /* elements per PE per step */

static float buf_a[CHUNK] MTIA_LOCAL;
static float buf_b[CHUNK] MTIA_LOCAL;
static float buf_out[CHUNK] MTIA_LOCAL;

struct vector_add_args {
  uint64_t out, a, b; /* device addresses of n floats */
  int64_t n;
};

MTIA_KERNEL(vector_add, "out:ptr a:ptr b:ptr n:i64");
int vector_add(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct vector_add_args, A);
  if (A->n < 0) return MTIA_KSTATUS_BAD_SHAPE;
  const uint64_t n = (uint64_t)A->n, pe = mtia_pe_id(), pes = mtia_num_pes();
  for (uint64_t start = pe * CHUNK; start < n; start += pes * CHUNK) {
    const uint32_t count = n - start < CHUNK ? (uint32_t)(n - start) : CHUNK;
    mtia_dma_in(buf_a, A->a + start * 4, count * 4ull);
    mtia_dma_in(buf_b, A->b + start * 4, count * 4ull);
    mtia_wait_all();
    mtia_wait(mtia_se_binary(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, buf_out, buf_a,
                             buf_b, count));
    mtia_wait(mtia_dma_out(A->out + start * 4, buf_out, count * 4ull));
  }
  return MTIA_KSTATUS_OK;
}

struct axpy_args {
  uint64_t out, x, y; /* device addresses of n floats */
  uint64_t alpha;     /* f32: the bit pattern in the low 4 bytes */
  int64_t n;
};

MTIA_KERNEL(axpy, "out:ptr x:ptr y:ptr alpha:f32 n:i64");
int axpy(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct axpy_args, A);
  if (A->n < 0) return MTIA_KSTATUS_BAD_SHAPE;
  const uint64_t n = (uint64_t)A->n, pe = mtia_pe_id(), pes = mtia_num_pes();
  for (uint64_t start = pe * CHUNK; start < n; start += pes * CHUNK) {
    const uint32_t count = n - start < CHUNK ? (uint32_t)(n - start) : CHUNK;
    mtia_dma_in(buf_a, A->x + start * 4, count * 4ull);
    mtia_dma_in(buf_b, A->y + start * 4, count * 4ull);
    mtia_wait_all();
    mtia_wait(mtia_se_binary_imm(MTIA_PE_SE_MUL, MTIA_PE_DT_FP32, buf_a, buf_a, A->alpha, count));
    mtia_wait(mtia_se_binary(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, buf_out, buf_a,
                             buf_b, count));
    mtia_wait(mtia_dma_out(A->out + start * 4, buf_out, count * 4ull));
  }
  return MTIA_KSTATUS_OK;
}
