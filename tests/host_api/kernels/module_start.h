/* The ELF entry of a test kernel module: it names no kernel, so it exits with
 * MTIA_KSTATUS_NO_KERNEL (as kernels/lib/module_start.S does for the library). Each kernel is
 * launched at its own entry (isa/pe/kernel_meta.h). Include it in one source file per module. */
#pragma once

#include "mtia_kernel.h"

__asm__(".pushsection .text.start, \"ax\"\n"
        ".globl _start\n"
        "_start:\n"
        "  li a0, " MTIA_STR(MTIA_KSTATUS_NO_KERNEL) "\n"
        "  ecall\n"
        ".popsection\n");
