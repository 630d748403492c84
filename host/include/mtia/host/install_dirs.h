// Where an installed mtia-emu keeps its data: <prefix>/share/mtia-emu holds the chip presets
// (presets/*.json) and the kernel library (mtia_kernels.elf). Programs look there before the
// build tree's paths, so an installation works without environment variables; the variables
// ($MTIA_EMU_PRESET_DIR, $MTIA_EMU_KERNELS) still come first where they are read.
#pragma once

#include <string>

namespace mtia::host {

// The data folder of the installation this program belongs to, or "" when it belongs to none
// (it runs from the build tree). The first that exists of:
//  1. <folder of the executable>/../share/mtia-emu: a program installed into <prefix>/bin, as
//     `cmake --install` puts mtia-emu;
//  2. the folder that mtia-emu-config.cmake compiles into a program built against an installed
//     mtia-emu (find_package(mtia-emu)): that installation's share/mtia-emu.
std::string installed_data_dir();

}  // namespace mtia::host
