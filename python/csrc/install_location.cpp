#include "install_location.h"

#include <dlfcn.h>

#include <filesystem>
#include <system_error>

namespace mtia::torch_backend {

const std::string& installed_data_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void*>(&installed_data_dir), &info) == 0 ||
        info.dli_fname == nullptr) {
      return std::string();
    }
    std::error_code ec;
    const fs::path so = fs::weakly_canonical(info.dli_fname, ec);
    if (ec) return std::string();
    // so: <prefix>/lib/pythonX.Y/site-packages/torch_mtia_emu/_C...so
    const fs::path prefix =
        so.parent_path().parent_path().parent_path().parent_path().parent_path();
    const fs::path data = prefix / "share" / "mtia-emu";
    return fs::is_regular_file(data / "mtia_kernels.elf", ec) ? data.string() : std::string();
  }();
  return dir;
}

}  // namespace mtia::torch_backend

// The host API looks up presets in the installation its program belongs to
// (mtia/isa/install_dirs.h), and asks this hook when the program itself (python) is not
// installed with mtia-emu: the extension answers with its own installation.
extern "C" __attribute__((visibility("default"))) const char* mtia_emu_installed_data_dir() {
  return mtia::torch_backend::installed_data_dir().c_str();
}
