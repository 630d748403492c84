// Where an installed torch_mtia_emu finds its installation's data (presets, kernel library).
#pragma once

#include <string>

namespace mtia::torch_backend {

// <prefix>/share/mtia-emu when this extension is installed under <prefix> by `cmake --install`
// (as <prefix>/lib/pythonX.Y/site-packages/torch_mtia_emu/), else "" (it runs from the build
// tree, or from the project's .venv, which use the build tree's presets and kernels).
const std::string& installed_data_dir();

}  // namespace mtia::torch_backend
