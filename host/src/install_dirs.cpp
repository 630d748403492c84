#include "mtia/host/install_dirs.h"

#include <filesystem>
#include <system_error>

// Defined by programs built against an installed mtia-emu: mtia-emu-config.cmake adds a source
// to mtia::host_api's users that returns the installation's share/mtia-emu. Weak, so that
// programs of the build tree, which define none, link without it and see a null address.
extern "C" __attribute__((weak)) const char* mtia_emu_installed_data_dir();

namespace mtia::host {

namespace fs = std::filesystem;

std::string installed_data_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = (exe.parent_path() / ".." / "share" / "mtia-emu").lexically_normal();
    if (fs::is_directory(beside, ec)) return beside.string();
  }
  if (mtia_emu_installed_data_dir != nullptr) {
    const fs::path sdk = mtia_emu_installed_data_dir();
    if (fs::is_directory(sdk, ec)) return sdk.string();
  }
  return "";
}

}  // namespace mtia::host
