/* Kernels for test_lazy_loads.cpp: each loads data from device memory into its local store with
 * DMA and then uses those bytes in one of the ways that must see them (the core, the SE, a DMA
 * out, a partial reload, the DPE), or lets the loaded source change before the DPE reads it.
 * The PE model may leave a load in device memory until its bytes are needed (PeGrid, "Loads
 * left in device memory"); these results must be the same whether it does or not. Every
 * buffer is carved from the bottom of the local store; sizes are in elements. */
#include "module_start.h"
#include "mtia_kernel.h"

#define WORDS 1024 /* 4 KB: loads of this size are left in device memory */

static uint8_t* ls_at(uint64_t offset) {
  return (uint8_t*)(uintptr_t)(mtia_ls_base() + offset);
}

/* A 2-D DMA: rows of `run` bytes, `dst_rs` / `src_rs` bytes apart. */
static mtia_tag_t dma_rows(uint64_t dst, uint8_t dst_space, uint64_t dst_rs, uint64_t src,
                           uint8_t src_space, uint64_t src_rs, uint64_t rows, uint64_t run) {
  mtia_pe_dma_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_DMA, 0);
  d.ndims = 2;
  d.elem_size = 4;
  d.src_space = src_space;
  d.dst_space = dst_space;
  d.src = src;
  d.dst = dst;
  d.sizes[0] = rows;
  d.sizes[1] = run / 4;
  d.src_strides[0] = src_rs;
  d.src_strides[1] = 4;
  d.dst_strides[0] = dst_rs;
  d.dst_strides[1] = 4;
  return mtia_dma_start(&d);
}

struct io_args {
  uint64_t out, in;
};

/* out[0] = the sum of in[0..WORDS) (int32, wrapping), summed by the core from the local store. */
MTIA_KERNEL(lazy_core_sum, "out:ptr in:ptr");
int lazy_core_sum(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct io_args, A);
  volatile int32_t* buf = (volatile int32_t*)ls_at(0);
  int32_t* sum = (int32_t*)ls_at(8192);
  mtia_wait(mtia_dma_in((void*)buf, A->in, WORDS * 4));
  uint32_t s = 0;
  for (int i = 0; i < WORDS; ++i) s += (uint32_t)buf[i];
  sum[0] = (int32_t)s;
  mtia_wait(mtia_dma_out(A->out, sum, 4));
  return 0;
}

/* out = in + 1 (int32), added in place by the SE. */
MTIA_KERNEL(lazy_se_add, "out:ptr in:ptr");
int lazy_se_add(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct io_args, A);
  void* buf = ls_at(0);
  mtia_wait(mtia_dma_in(buf, A->in, WORDS * 4));
  mtia_wait(mtia_se_binary_imm(MTIA_PE_SE_ADD, MTIA_PE_DT_INT32, buf, buf, mtia_imm_i32(1), WORDS));
  mtia_wait(mtia_dma_out(A->out, buf, WORDS * 4));
  return 0;
}

/* out = in, through the local store. */
MTIA_KERNEL(lazy_round_trip, "out:ptr in:ptr");
int lazy_round_trip(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct io_args, A);
  void* buf = ls_at(0);
  mtia_wait(mtia_dma_in(buf, A->in, WORDS * 4));
  mtia_wait(mtia_dma_out(A->out, buf, WORDS * 4));
  return 0;
}

struct partial_args {
  uint64_t out, in, patch;
};

/* out = in with words [64, 64 + 256) replaced by patch[0..256): a second load over part of the
 * first. */
MTIA_KERNEL(lazy_partial_reload, "out:ptr in:ptr patch:ptr");
int lazy_partial_reload(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct partial_args, A);
  uint8_t* buf = ls_at(0);
  mtia_tag_t t = mtia_dma_in(buf, A->in, WORDS * 4);
  mtia_wait(mtia_dma_in(buf + 64 * 4, A->patch, 256 * 4));
  mtia_wait(t);
  mtia_wait(mtia_dma_out(A->out, buf, WORDS * 4));
  return 0;
}

struct matmul_args {
  uint64_t c, x, eye, z;
};

/* 32 x 32 fp32. PE 0 loads A = X and B = I; then PE 1 overwrites X with Z (its own DMA, after a
 * barrier); then PE 0 computes C = A @ B, which must be the X it loaded. Grid 1 x 2. */
MTIA_KERNEL(lazy_source_overwritten, "c:ptr x:ptr eye:ptr z:ptr");
int lazy_source_overwritten(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct matmul_args, A);
  const uint64_t bytes = 32 * 32 * 4;
  uint8_t* a = ls_at(0);
  uint8_t* b = ls_at(bytes);
  uint8_t* c = ls_at(2 * bytes);
  if (mtia_pe_id() == 0) {
    mtia_wait(mtia_dma_in(a, A->x, bytes));
    mtia_wait(mtia_dma_in(b, A->eye, bytes));
  }
  mtia_barrier();
  if (mtia_pe_id() == 1) {
    mtia_wait(mtia_dma_in(a, A->z, bytes));
    mtia_wait(mtia_dma_out(A->x, a, bytes));
  }
  mtia_barrier();
  if (mtia_pe_id() == 0) {
    mtia_wait(mtia_matmul(MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 0, c, 32, a, 32, b, 32, 32, 32, 32));
    mtia_wait(mtia_dma_out(A->c, c, bytes));
  }
  return 0;
}

/* The same on one PE, which overwrites X itself (from another buffer) before the matmul. */
MTIA_KERNEL(lazy_source_overwritten_by_self, "c:ptr x:ptr eye:ptr z:ptr");
int lazy_source_overwritten_by_self(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct matmul_args, A);
  const uint64_t bytes = 32 * 32 * 4;
  uint8_t* a = ls_at(0);
  uint8_t* b = ls_at(bytes);
  uint8_t* c = ls_at(2 * bytes);
  uint8_t* z = ls_at(3 * bytes);
  mtia_wait(mtia_dma_in(a, A->x, bytes));
  mtia_wait(mtia_dma_in(b, A->eye, bytes));
  mtia_wait(mtia_dma_in(z, A->z, bytes));
  mtia_wait(mtia_dma_out(A->x, z, bytes));
  mtia_wait(mtia_matmul(MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 0, c, 32, a, 32, b, 32, 32, 32, 32));
  mtia_wait(mtia_dma_out(A->c, c, bytes));
  return 0;
}

struct window_args {
  uint64_t c, a, b;
  int64_t lda_dev;
};

/* A 2-D load of a 64 x 64 box out of the 64 x lda_dev fp32 matrix at `a` (its row stride is
 * longer than the box's row), then C (32 x 32) = the box's rows 8..40, columns 16..48 @ B (the
 * first 32 x 32 of b, 32 columns): the DPE's operand is inside the load, at an offset. */
MTIA_KERNEL(lazy_sub_tile, "c:ptr a:ptr b:ptr lda_dev:i64");
int lazy_sub_tile(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct window_args, A);
  uint8_t* box = ls_at(0);
  uint8_t* b = ls_at(64 * 64 * 4);
  uint8_t* c = ls_at(64 * 64 * 4 + 32 * 32 * 4);
  mtia_wait(dma_rows((uint64_t)(uintptr_t)box, MTIA_PE_SPACE_LOCAL, 64 * 4, A->a,
                     MTIA_PE_SPACE_DEVICE, (uint64_t)A->lda_dev * 4, 64, 64 * 4));
  mtia_wait(mtia_dma_in(b, A->b, 32 * 32 * 4));
  mtia_wait(mtia_matmul(MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 0, c, 32, box + (8 * 64 + 16) * 4, 64, b,
                        32, 32, 32, 32));
  mtia_wait(mtia_dma_out(A->c, c, 32 * 32 * 4));
  return 0;
}
