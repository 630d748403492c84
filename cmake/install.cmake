# `cmake --install`: the SDK a program or a kernel author builds against (README.md, "Building
# against mtia-emu"). Under the prefix:
#   bin/mtia-emu                           the command (tools/CMakeLists.txt installs it)
#   include/mtia/                          the host API's public headers, with isa/ and driver/
#   lib/libmtia_*.a                        the libraries, backends included
#   lib/cmake/mtia-emu/                    the package config: mtia::host_api, mtia_add_kernel
#   share/mtia-emu/presets/                the chip presets
#   share/mtia-emu/mtia_kernels.elf        the kernel library (tools/CMakeLists.txt)
#   share/mtia-emu/kernels/                the kernel SDK: the intrinsics header, the kernel
#                                          library's headers, runtime sources and link.ld
#   lib/python3.X/site-packages/           torch_mtia_emu, where it is built (python/)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MTIA_INSTALL_DATADIR ${CMAKE_INSTALL_DATADIR}/mtia-emu)
set(MTIA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mtia-emu)

# What a host program links: the host API and the in-process backend that it opens devices
# through (the backend brings the simulator, firmware and PE model as link-only dependencies).
# The backend registers itself from a static registrar, so it is linked whole (see
# backends/CMakeLists.txt); the export names its library by the exported target's name.
add_library(mtia_installed_host_api INTERFACE)
target_link_libraries(mtia_installed_host_api INTERFACE
  mtia_host_api
  $<BUILD_INTERFACE:mtia_backend_inprocess>
  "$<INSTALL_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,mtia::backend_inprocess_impl>>")

set(exported
  mtia_installed_host_api:host_api
  mtia_host_api:host_api_core
  mtia_backend_inprocess_impl:backend_inprocess_impl
  mtia_driver:driver
  mtia_isa:isa
  mtia_host:host
  mtia_trace:trace
  mtia_log:log
  mtia_settings:settings
  mtia_sim:sim
  mtia_pe:pe
  mtia_firmware:firmware
  mtia_warnings:warnings)
set(exported_targets)
foreach(pair IN LISTS exported)
  string(REPLACE ":" ";" pair ${pair})
  list(GET pair 0 target)
  list(GET pair 1 name)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  list(APPEND exported_targets ${target})
endforeach()
install(TARGETS ${exported_targets} EXPORT mtia-emu-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT mtia-emu-targets NAMESPACE mtia:: DESTINATION ${MTIA_INSTALL_CMAKEDIR})

# Public headers: the host API's, and the isa/, host/, tracing/ and driver/ headers they
# include. The isa/ headers are also the kernels' (kernel metadata, PE ops).
foreach(dir isa host tracing driver host_api)
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/${dir}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()

install(DIRECTORY ${CMAKE_SOURCE_DIR}/presets/ DESTINATION ${MTIA_INSTALL_DATADIR}/presets
        FILES_MATCHING PATTERN "*.json")

# The kernel SDK: what mtia_add_kernel compiles a user's kernels with.
set(kernel_sdk ${MTIA_INSTALL_DATADIR}/kernels)
install(FILES ${CMAKE_SOURCE_DIR}/kernels/include/mtia_kernel.h DESTINATION ${kernel_sdk}/include)
install(FILES ${CMAKE_SOURCE_DIR}/kernels/link.ld DESTINATION ${kernel_sdk})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/kernels/lib/ DESTINATION ${kernel_sdk}/lib
        FILES_MATCHING PATTERN "*.h" PATTERN "*.S")
install(FILES ${CMAKE_SOURCE_DIR}/kernels/src/crt0.S ${CMAKE_SOURCE_DIR}/kernels/src/rt.c
        DESTINATION ${kernel_sdk}/src)

# The package config, found by find_package(mtia-emu CONFIG).
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/mtia-emu-config.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/mtia-emu-config.cmake
                              INSTALL_DESTINATION ${MTIA_INSTALL_CMAKEDIR}
                              PATH_VARS MTIA_INSTALL_DATADIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/mtia-emu-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/mtia-emu-config.cmake
              ${CMAKE_BINARY_DIR}/cmake/mtia-emu-config-version.cmake
              ${CMAKE_SOURCE_DIR}/cmake/mtia-emu-kernels.cmake
              ${CMAKE_SOURCE_DIR}/kernels/mtia_kernel_image.cmake
        DESTINATION ${MTIA_INSTALL_CMAKEDIR})
