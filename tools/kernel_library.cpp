#include "kernel_library.h"

#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "mtia/host/install_dirs.h"
#include "mtia/settings/settings.h"

#ifndef MTIA_KERNEL_LIBRARY_ELF
#error "MTIA_KERNEL_LIBRARY_ELF must be defined by the build (tools/CMakeLists.txt)"
#endif

namespace mtia::tools {

namespace fs = std::filesystem;

std::string kernel_library_path() {
  if (auto env = settings::read("MTIA_EMU_KERNELS")) {
    // An explicit choice is never silently replaced by another library.
    if (!fs::is_regular_file(*env)) {
      throw std::runtime_error("MTIA_EMU_KERNELS=" + *env +
                               " is not a file; point it at a kernel library "
                               "(build/kernels/mtia_kernels.elf) or unset it");
    }
    return *env;
  }
  std::error_code ec;
  if (const std::string dir = host::installed_data_dir(); !dir.empty()) {
    const fs::path installed = fs::path(dir) / "mtia_kernels.elf";
    if (fs::is_regular_file(installed, ec)) return installed.string();
  }
  if (fs::is_regular_file(MTIA_KERNEL_LIBRARY_ELF, ec)) return MTIA_KERNEL_LIBRARY_ELF;
  throw std::runtime_error(
      "kernel library not found: MTIA_EMU_KERNELS is not set, there is none in an "
      "installation (<prefix>/share/mtia-emu/mtia_kernels.elf) and the "
      "build's " MTIA_KERNEL_LIBRARY_ELF
      " does not exist; build it (cmake --build build --target mtia_kernel_mtia_kernels) or "
      "set MTIA_EMU_KERNELS to its path");
}

}  // namespace mtia::tools
