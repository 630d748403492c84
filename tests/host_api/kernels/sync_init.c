/* Kernels for the sanitizer's initcheck and synccheck (test_sanitizer.cpp), each with a bug the
 * test plants by an argument and its fixed twin. Built as a kernel module like kernels/ builds
 * the library (tests/host_api/CMakeLists.txt). */
#include "module_start.h"
#include "mtia_kernel.h"

/* n int32 from device address `src` to the start of the local store, or back to `dst`; each
 * returns the DMA's tag. */
static uint64_t copy_in(uint64_t src, int64_t n) {
  mtia_pe_dma_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_DMA, 0);
  d.ndims = 1;
  d.elem_size = 4;
  d.src_space = MTIA_PE_SPACE_DEVICE;
  d.dst_space = MTIA_PE_SPACE_LOCAL;
  d.src = src;
  d.dst = mtia_ls_base();
  d.sizes[0] = (uint64_t)n;
  d.src_strides[0] = 4;
  d.dst_strides[0] = 4;
  return mtia_dma_start(&d);
}

static uint64_t copy_out(uint64_t dst, int64_t n) {
  mtia_pe_dma_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_DMA, 0);
  d.ndims = 1;
  d.elem_size = 4;
  d.src_space = MTIA_PE_SPACE_LOCAL;
  d.dst_space = MTIA_PE_SPACE_DEVICE;
  d.src = mtia_ls_base();
  d.dst = dst;
  d.sizes[0] = (uint64_t)n;
  d.src_strides[0] = 4;
  d.dst_strides[0] = 4;
  return mtia_dma_start(&d);
}

struct stage_args {
  uint64_t in;     /* n int32 */
  uint64_t tmp;    /* n int32 scratch, written by PE 0's first pass */
  uint64_t out;    /* n int32 */
  int64_t n;       /* elements, 1..16384 */
  int64_t barrier; /* 1: a barrier between PE 0 writing tmp and PE 1 reading it (the fix) */
};

/* Two stages through a scratch buffer: PE 0 copies in -> tmp; PE 1 copies tmp -> out. Without
 * the barrier PE 1 reads tmp before anything wrote it (initcheck); on a 1x1 grid PE 0 does
 * both and needs none. */
MTIA_KERNEL(staged_copy, "in:ptr tmp:ptr out:ptr n:i64 barrier:i64");
int staged_copy(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct stage_args, A);
  if (A->n < 1 || A->n > 16384) return 1;
  const uint64_t pe = mtia_pe_id(), pes = mtia_num_pes();
  if (pe == 0) {
    mtia_wait(copy_in(A->in, A->n));
    mtia_wait(copy_out(A->tmp, A->n));
  }
  if (A->barrier) mtia_barrier();
  if (pe == pes - 1) {
    mtia_wait(copy_in(A->tmp, A->n));
    mtia_wait(copy_out(A->out, A->n));
  }
  return 0;
}

struct early_args {
  uint64_t in;  /* n int32 per PE */
  uint64_t out; /* n int32 per PE */
  int64_t n;    /* elements per PE, 1..16384 */
  int64_t skip; /* PEs with an index >= skip have no work */
  int64_t fix;  /* 0: a PE without work returns before the barrier; 1: it reaches it */
};

/* Each PE with work copies its slice in, waits at a barrier, then copies it out. */
MTIA_KERNEL(early_exit, "in:ptr out:ptr n:i64 skip:i64 fix:i64");
int early_exit(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct early_args, A);
  if (A->n < 1 || A->n > 16384) return 1;
  const uint64_t pe = mtia_pe_id();
  const int work = (int64_t)pe < A->skip;
  if (!work && !A->fix) return 0;
  const uint64_t off = pe * (uint64_t)A->n * 4;
  if (work) mtia_wait(copy_in(A->in + off, A->n));
  mtia_barrier();
  if (work) mtia_wait(copy_out(A->out + off, A->n));
  return 0;
}

struct wait_args {
  uint64_t in;
  uint64_t out;
  int64_t n;    /* 1..16384 */
  int64_t slip; /* added to the tag the kernel waits on: 0 is right */
};

/* Copies in and out, waiting on the tag dma.start returned plus `slip`. */
MTIA_KERNEL(wait_tag, "in:ptr out:ptr n:i64 slip:i64");
int wait_tag(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct wait_args, A);
  if (A->n < 1 || A->n > 16384) return 1;
  const uint64_t tag = copy_in(A->in, A->n);
  mtia_wait(tag + (uint64_t)A->slip);
  mtia_wait(copy_out(A->out, A->n));
  return 0;
}

struct tile_args {
  uint64_t in;  /* n int32 */
  uint64_t out; /* n int32 */
  int64_t n;    /* 1..4096 */
  int64_t use;  /* how the tile is used: 0 stored by a DMA, 1 added to itself by the SE (out =
                   2 * in), 2 read by the core (out = in + 1) */
  int64_t load; /* 1: the tile is loaded first (the fix); 0: it is used as the launch found it */
};

/* A local-store tile used before (or after) loading it. */
MTIA_KERNEL(use_tile, "in:ptr out:ptr n:i64 use:i64 load:i64");
int use_tile(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct tile_args, A);
  if (A->n < 1 || A->n > 4096) return 1;
  const uint32_t n = (uint32_t)A->n;
  int32_t* tile = (int32_t*)(uintptr_t)mtia_ls_base();
  int32_t* result = tile + n;
  if (A->load) mtia_wait(mtia_dma_in(tile, A->in, n * 4u));
  if (A->use == 0) {
    result = tile;
  } else if (A->use == 1) {
    mtia_wait(
        mtia_se_binary(MTIA_PE_SE_ADD, MTIA_PE_DT_INT32, MTIA_PE_DT_INT32, result, tile, tile, n));
  } else {
    for (uint32_t i = 0; i < n; ++i) result[i] = tile[i] + 1;
  }
  mtia_wait(mtia_dma_out(A->out, result, n * 4u));
  return 0;
}

struct flight_args {
  uint64_t in;  /* n int32 */
  uint64_t out; /* n int32 */
  int64_t n;    /* 1..4096 */
  int64_t use;  /* 0: the SE adds the tile to itself (out = 2 * in); 1: the core reads it (out =
                   in + 1); 2: the tile is stored, then loaded again (out = in); 3: as 0, the
                   load issued by a function of its own */
  int64_t wait; /* 1: the kernel waits for the DMA before the next use of its bytes (the fix) */
};

/* A tile used while the DMA that loads it (or, for use 2, stores it) is still in flight. */
/* Issues the tile's load from a function of its own, kept out of line: a report that names
 * the load names the line that called it too. */
__attribute__((noinline)) static mtia_tag_t load_tile(int32_t* tile, uint64_t in, uint32_t n) {
  return mtia_dma_in(tile, in, n * 4u);
}

MTIA_KERNEL(in_flight, "in:ptr out:ptr n:i64 use:i64 wait:i64");
int in_flight(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct flight_args, A);
  if (A->n < 1 || A->n > 4096) return 1;
  const uint32_t n = (uint32_t)A->n;
  int32_t* tile = (int32_t*)(uintptr_t)mtia_ls_base();
  int32_t* result = tile + n;
  const mtia_tag_t load =
      A->use == 3 ? load_tile(tile, A->in, n) : mtia_dma_in(tile, A->in, n * 4u);
  if (A->wait || A->use == 2) mtia_wait(load);
  if (A->use == 0 || A->use == 3) {
    mtia_wait(
        mtia_se_binary(MTIA_PE_SE_ADD, MTIA_PE_DT_INT32, MTIA_PE_DT_INT32, result, tile, tile, n));
  } else if (A->use == 1) {
    for (uint32_t i = 0; i < n; ++i) result[i] = tile[i] + 1;
  } else {
    /* The store reads the tile; loading it again overwrites what the store may not have read. */
    const mtia_tag_t store = mtia_dma_out(A->out, tile, n * 4u);
    if (A->wait) mtia_wait(store);
    mtia_wait(mtia_dma_in(tile, A->in, n * 4u));
    result = tile;
  }
  mtia_wait(mtia_dma_out(A->out, result, n * 4u));
  mtia_wait_all();
  return 0;
}
