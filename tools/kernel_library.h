// Where programs built with this project find the kernel library, mtia_kernels.elf.
#pragma once

#include <string>

namespace mtia::tools {

// Path of the kernel library, the first of:
//  1. $MTIA_EMU_KERNELS, when set (it must name an existing file);
//  2. <dir of this executable>/../share/mtia-emu/mtia_kernels.elf (the `cmake --install`
//     layout);
//  3. the image the build produced (build/kernels/mtia_kernels.elf), baked in at build time.
// Throws std::runtime_error naming the places looked at and what to do when none exists.
std::string kernel_library_path();

}  // namespace mtia::tools
