# Kernel entry. The core starts here with sp at the top of the local store, a0 = the argument
# block's address and a1 = its size (see docs/pe-isa.md, "Launch state").
  .section .text.start, "ax"
  .globl _start
  .type _start, @function
_start:
  call mtia_kernel_main
  # a0 holds the kernel's return value: the exit status.
  ecall
  .size _start, . - _start
