/* Kernels that fail on purpose, one per fault kind, for test_kernel_faults.cpp. Each takes the
 * launch PE that is to fail (`pe`); every other PE exits 0 at once. The instruction that fails
 * is the first of a routine in the assembly below, so the test finds the pc it expects in the
 * ELF symbol table (fault_*). Built as a kernel module like kernels/ builds the library
 * (tests/host_api/CMakeLists.txt). */
#include "module_start.h"
#include "mtia_kernel.h"

/* Each routine takes a0 (an address or a descriptor) and faults on its first instruction. */
__asm__(".text\n"
        ".p2align 2\n"
        ".globl fault_illegal\n"
        "fault_illegal:\n"
        "  .4byte 0\n" /* the all-zero word is not an RV64IM instruction */
        "  ret\n"
        ".globl fault_load\n"
        "fault_load:\n"
        "  ld a0, 0(a0)\n"
        "  ret\n"
        ".globl fault_store\n"
        "fault_store:\n"
        "  sd zero, 0(a0)\n"
        "  ret\n"
        ".globl fault_matmul\n"
        "fault_matmul:\n"
        "  " MTIA_INSN_(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_MATMUL, MTIA_PE_F7_V1) "a0, a0, x0\n"
        "  ret\n"
        ".globl fault_dma\n"
        "fault_dma:\n"
        "  " MTIA_INSN_(MTIA_PE_OPC_DMA, MTIA_PE_F3_DMA, MTIA_PE_F7_V1) "a0, a0, x0\n"
        "  ret\n"
        ".globl fault_spin\n"
        "fault_spin:\n"
        "  j fault_spin\n");

uint64_t fault_illegal(uint64_t);
uint64_t fault_load(uint64_t addr);
uint64_t fault_store(uint64_t addr);
uint64_t fault_matmul(const mtia_pe_matmul_desc* d);
uint64_t fault_dma(const mtia_pe_dma_desc* d);
void fault_spin(void);

struct pe_arg {
  int64_t pe;
};
struct pe_addr_args {
  int64_t pe;
  int64_t addr;
};

MTIA_KERNEL(illegal_instruction, "pe:i64");
int illegal_instruction(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct pe_arg, A);
  if ((int64_t)mtia_pe_id() == A->pe) fault_illegal(0);
  return 0;
}

/* An 8-byte load from a local-store address that is 4 past an 8-byte boundary. */
MTIA_KERNEL(misaligned_load, "pe:i64");
int misaligned_load(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct pe_arg, A);
  if ((int64_t)mtia_pe_id() == A->pe) return (int)fault_load(mtia_ls_base() + 4);
  return 0;
}

/* A store to `addr`, a core address outside every mapped window. */
MTIA_KERNEL(out_of_range_store, "pe:i64 addr:i64");
int out_of_range_store(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct pe_addr_args, A);
  if ((int64_t)mtia_pe_id() == A->pe) fault_store((uint64_t)A->addr);
  return 0;
}

/* A DPE matmul whose output tile C starts past the end of the local store. */
MTIA_KERNEL(dpe_outside_local_store, "pe:i64");
int dpe_outside_local_store(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct pe_arg, A);
  if ((int64_t)mtia_pe_id() != A->pe) return 0;
  mtia_pe_matmul_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_MATMUL, 0);
  d.in_dtype = MTIA_PE_DT_FP32;
  d.out_dtype = MTIA_PE_DT_FP32;
  d.m = d.n = d.k = 8;
  d.lda = d.ldb = d.ldc = 8;
  d.a = mtia_ls_base();
  d.b = mtia_ls_base() + 256;
  d.c = mtia_ls_base() + mtia_ls_bytes() + 4096;
  fault_matmul(&d);
  return 0;
}

/* A local DMA that reads 64 bytes from device address `addr` (outside device memory). */
MTIA_KERNEL(dma_outside_device_memory, "pe:i64 addr:i64");
int dma_outside_device_memory(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct pe_addr_args, A);
  if ((int64_t)mtia_pe_id() != A->pe) return 0;
  mtia_pe_dma_desc d;
  MTIA_ZERO_(d);
  d.hdr = mtia_desc_header(MTIA_PE_DESC_DMA, 0);
  d.ndims = 1;
  d.elem_size = 8;
  d.src_space = MTIA_PE_SPACE_DEVICE;
  d.dst_space = MTIA_PE_SPACE_LOCAL;
  d.src = (uint64_t)A->addr;
  d.dst = mtia_ls_base();
  d.sizes[0] = 8;
  d.src_strides[0] = 8;
  d.dst_strides[0] = 8;
  mtia_wait(fault_dma(&d));
  return 0;
}

/* Never returns: the launch's watchdog stops it. */
MTIA_KERNEL(spin_forever, "pe:i64");
int spin_forever(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct pe_arg, A);
  if ((int64_t)mtia_pe_id() == A->pe) fault_spin();
  return 0;
}

/* Returns `status` on PE `pe`. */
MTIA_KERNEL(exit_with, "pe:i64 status:i64");
int exit_with(const uint64_t* args, uint64_t args_bytes) {
  MTIA_KERNEL_ARGS(struct pe_addr_args, A);
  return (int64_t)mtia_pe_id() == A->pe ? (int)A->addr : 0;
}
