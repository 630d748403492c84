// Where programs built with this project find the kernel library, mtia_kernels.elf.
#pragma once

#include <string>

namespace mtia::tools {

// Path of the kernel library, the first of:
//  1. $MTIA_EMU_KERNELS, when set (it must name an existing file);
//  2. mtia_kernels.elf in the installation the program belongs to (mtia/isa/install_dirs.h:
//     <prefix>/share/mtia-emu, as `cmake --install` lays it out);
//  3. the image the build produced (build/kernels/mtia_kernels.elf), baked in at build time.
// Throws std::runtime_error naming the places looked at and what to do when none exists.
std::string kernel_library_path();

}  // namespace mtia::tools
