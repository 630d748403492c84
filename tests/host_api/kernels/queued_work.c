/* Kernels for test_queued_work.cpp: one PE's unit math on its local store, still queued on a
 * helper thread when the PEs pass a barrier (the PE model joins at a barrier only the work that
 * reaches device memory), is read or overwritten by another PE through the local store's device
 * window. The other PE must see the finished result, and its write must land after it. Grid
 * 1 x 2; 128 x 128 fp32 matrices (a v2 local store holds three). */
#include "module_start.h"
#include "mtia_kernel.h"

#define N 128
#define BYTES (N * N * 4)
#define STEPS 32 /* matmuls into C: enough host work that it is still running at the barrier */

/* PE pe's local-store byte `offset` as a device address: its window (isa/address_map.h). */
static uint64_t ls_window(uint64_t pe, uint64_t offset) {
  return 0x020000000000ull + pe * 0x100000ull + offset;
}

static uint8_t* ls_at(uint64_t offset) {
  return (uint8_t*)(uintptr_t)(mtia_ls_base() + offset);
}

struct args {
  uint64_t c, a, b, z;
};

/* PE 0's part: C = STEPS x (A @ B), accumulated by the DPE in its local store. It does not wait
 * for the matmuls: the emulator applies an operation at issue, so PE 1 sees C whole after the
 * barrier. (Waiting would also let simulated time pass the grid's quantum, where all the work
 * is joined; this way the barrier comes first.) */
static void multiply(const struct args* A, uint8_t* a, uint8_t* b, uint8_t* c) {
  mtia_wait(mtia_dma_in(a, A->a, BYTES));
  mtia_wait(mtia_dma_in(b, A->b, BYTES));
  for (int s = 0; s < STEPS; ++s) {
    const uint16_t flags = s > 0 ? MTIA_PE_MM_ACCUMULATE : 0;
    mtia_matmul(MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, flags, c, N, a, N, b, N, N, N, N);
  }
}

/* PE 0: C = STEPS x (A @ B) in its local store. PE 1, after a barrier: copies PE 0's C to c in
 * device memory through the window. */
MTIA_KERNEL(window_read_after_barrier, "c:ptr a:ptr b:ptr z:ptr");
int window_read_after_barrier(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct args, A);
  if (mtia_pe_id() == 0) multiply(A, ls_at(0), ls_at(BYTES), ls_at(2 * BYTES));
  mtia_barrier();
  if (mtia_pe_id() == 1) {
    mtia_wait(mtia_dma_1d(A->c, MTIA_PE_SPACE_DEVICE, ls_window(0, 2 * BYTES), MTIA_PE_SPACE_DEVICE,
                          BYTES));
  }
  return 0;
}

/* PE 0: C = STEPS x (A @ B) in its local store. PE 1, after a barrier: writes z over PE 0's C
 * through the window. PE 0, after another barrier: copies its C to c, which must be z. */
MTIA_KERNEL(window_write_after_barrier, "c:ptr a:ptr b:ptr z:ptr");
int window_write_after_barrier(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct args, A);
  uint8_t* c = ls_at(2 * BYTES);
  if (mtia_pe_id() == 0) multiply(A, ls_at(0), ls_at(BYTES), c);
  mtia_barrier();
  if (mtia_pe_id() == 1) {
    mtia_wait(mtia_dma_1d(ls_window(0, 2 * BYTES), MTIA_PE_SPACE_DEVICE, A->z, MTIA_PE_SPACE_DEVICE,
                          BYTES));
  }
  mtia_barrier();
  if (mtia_pe_id() == 0) mtia_wait(mtia_dma_out(A->c, c, BYTES));
  return 0;
}
