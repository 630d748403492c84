/* A kernel for the sanitizer's racecheck (test_sanitizer.cpp): each PE reads or writes rows of
 * device memory placed by the test, all at once or one PE after another with barriers between
 * them. Built as a kernel module like kernels/ builds the library
 * (tests/host_api/CMakeLists.txt). */
#include "module_start.h"
#include "mtia_kernel.h"

struct touch_args {
  uint64_t buf;       /* device address of PE 0's first row */
  int64_t pe_offset;  /* bytes from PE p's first row to PE p + 1's */
  int64_t rows;       /* rows each PE touches */
  int64_t row_bytes;  /* bytes per row: a multiple of 4; rows * row_bytes at most 64 KiB */
  int64_t row_stride; /* bytes from one of a PE's rows to its next */
  int64_t mode;       /* 0: every PE reads its rows; 1: every PE writes them (int32 pe + 1);
                         2: PE 0 writes, the others read */
  int64_t staged;     /* 1: PE p touches its rows after p barriers, so one PE at a time */
};

MTIA_KERNEL(touch_rows,
            "buf:ptr pe_offset:i64 rows:i64 row_bytes:i64 row_stride:i64 mode:i64 staged:i64");
int touch_rows(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct touch_args, A);
  if (A->rows < 1 || A->row_bytes < 4 || A->row_bytes % 4 != 0 || A->rows * A->row_bytes > 65536) {
    return 1;
  }
  const uint64_t pe = mtia_pe_id();
  const uint64_t pes = mtia_num_pes();
  const int write = A->mode == 2 ? pe == 0 : A->mode == 1;
  int32_t* tile = (int32_t*)(uintptr_t)mtia_ls_base();
  for (int64_t i = 0; i < A->rows * A->row_bytes / 4; ++i) tile[i] = (int32_t)pe + 1;
  const uint64_t turns = A->staged ? pes : 1;
  for (uint64_t turn = 0; turn < turns; ++turn) {
    if (!A->staged || turn == pe) {
      mtia_pe_dma_desc d;
      MTIA_ZERO_(d);
      d.hdr = mtia_desc_header(MTIA_PE_DESC_DMA, 0);
      d.ndims = 2;
      d.elem_size = 4;
      const uint64_t dev = A->buf + pe * (uint64_t)A->pe_offset;
      d.src_space = write ? MTIA_PE_SPACE_LOCAL : MTIA_PE_SPACE_DEVICE;
      d.dst_space = write ? MTIA_PE_SPACE_DEVICE : MTIA_PE_SPACE_LOCAL;
      d.src = write ? mtia_ls_base() : dev;
      d.dst = write ? dev : mtia_ls_base();
      d.sizes[0] = (uint64_t)A->rows;
      d.sizes[1] = (uint64_t)A->row_bytes / 4;
      d.src_strides[0] = write ? (uint64_t)A->row_bytes : (uint64_t)A->row_stride;
      d.dst_strides[0] = write ? (uint64_t)A->row_stride : (uint64_t)A->row_bytes;
      d.src_strides[1] = 4;
      d.dst_strides[1] = 4;
      mtia_wait(mtia_dma_start(&d));
    }
    if (A->staged) mtia_barrier();
  }
  return 0;
}
