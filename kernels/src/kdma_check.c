/* Test kernel for the kernel library's DMA helpers (tests/pe/test_kdma_rows.cpp): issues every
 * case of a grid of 2-D boxes three times, through kdma (the general builder), kdma_rows (the
 * fast path for contiguous rows, with its descriptor cache) and kdma_rows_keyed (the same
 * cache checked by a key naming the box), so that the test's recording port can compare each
 * triple of descriptors. Returns the number of cases. */
#include <stdint.h>

#include "../lib/klib.h"

int mtia_kernel_main(const void* args, uint64_t args_bytes) {
  (void)args;
  (void)args_bytes;
  static const uint64_t extents[] = {1, 2, 3, 16};
  static const unsigned sizes[] = {1, 2, 4, 8};
  /* Three address pairs a box: the cache builds for the first, reuses its descriptor for the
   * second (moved, same alignment) and must rebuild for the third (source moved by one
   * element, unless elements are 8 bytes wide). */
  static const uint64_t src_at[] = {0, 128, 0}, dst_at[] = {0, 256, 0};
  krows_dma cache, keyed;
  MTIA_ZERO_(cache);
  MTIA_ZERO_(keyed);
  int cases = 0;
  for (unsigned e = 0; e < 4; ++e) {
    const unsigned es = sizes[e];
    for (unsigned r = 0; r < 4; ++r) {
      for (unsigned c = 0; c < 4; ++c) {
        const uint64_t rows = extents[r], cols = extents[c], run = cols * es;
        /* Row strides: packed, padded by one element, twice the run, and 0 (one row repeated). */
        const uint64_t src_strides[] = {run, run + es, 2 * run, 0};
        const uint64_t dst_strides[] = {run, run + es};
        for (unsigned s = 0; s < 4; ++s) {
          for (unsigned d = 0; d < 2; ++d) {
            for (unsigned v = 0; v < 3; ++v) {
              const uint64_t src = 0x400000 + src_at[v] + (v == 2 ? es : 0);
              const uint64_t dst = mtia_ls_base() + 64 + dst_at[v];
              const uint64_t box[2] = {rows, cols};
              const int64_t ss[2] = {(int64_t)src_strides[s], (int64_t)es};
              const int64_t ds[2] = {(int64_t)dst_strides[d], (int64_t)es};
              kdma(dst, MTIA_PE_SPACE_LOCAL, ds, src, MTIA_PE_SPACE_DEVICE, ss, box, 2, es);
              kdma_rows(&cache, dst, MTIA_PE_SPACE_LOCAL, dst_strides[d], src, MTIA_PE_SPACE_DEVICE,
                        src_strides[s], rows, cols, es);
              /* One key a box: the three address pairs share it. */
              const uint64_t key = 1 + (uint64_t)cases / 3;
              kdma_rows_keyed(&keyed, key, dst, MTIA_PE_SPACE_LOCAL, dst_strides[d], src,
                              MTIA_PE_SPACE_DEVICE, src_strides[s], rows, cols, es);
              ++cases;
            }
          }
        }
      }
    }
  }
  return cases;
}
