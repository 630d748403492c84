# The ELF entry point of a kernel module. A module holds many kernels, each launched at its own
# entry (mtia_entry_<name>, recorded in .mtia.meta); a launch that starts here instead names no
# kernel, so it ends at once with MTIA_KSTATUS_NO_KERNEL (6, mtia/isa/pe/kernel_meta.h).
  .section .text.start, "ax"
  .globl _start
  .type _start, @function
_start:
  li a0, 6
  ecall
  .size _start, . - _start
