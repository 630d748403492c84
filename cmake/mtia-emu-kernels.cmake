# mtia_add_kernel(<name> SOURCES <files...> [INCLUDE_DIRECTORIES <dirs...>]
#                 [COMPILE_OPTIONS <flags...>])
#
# Builds a kernel module, ${CMAKE_CURRENT_BINARY_DIR}/<name>.elf, from C (and assembly) device
# kernels that declare themselves with MTIA_KERNEL (mtia_kernel.h): each kernel is launched by
# name (Device::launch, `mtia-emu run`). The sources are compiled with clang for the PE's RV64IM
# core and linked with ld.lld and the installation's link.ld, with its runtime (rt.c, the
# module entry). Target <name> builds it by default; its ELF_PATH property names the image, e.g.
#   mtia_add_kernel(my_kernels SOURCES kernels/scale.c)
#   add_dependencies(my_program my_kernels)
#   target_compile_definitions(my_program PRIVATE
#                              MY_KERNELS="$<TARGET_PROPERTY:my_kernels,ELF_PATH>")
# Kernels include "mtia_kernel.h" (the intrinsics) and may include the kernel library's helpers
# ("klib.h"); they are C99, freestanding, and compiled with -O2 -Wall -Wextra. Relative
# SOURCES and INCLUDE_DIRECTORIES are taken from ${CMAKE_CURRENT_SOURCE_DIR}. The calling
# project need not enable C: clang runs as a custom command, not as CMake's C compiler.
# Included by mtia-emu-config.cmake, which sets mtia-emu_DATA_DIR and mtia-emu_INCLUDE_DIR.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/mtia_kernel_image.cmake)

find_program(MTIA_KERNEL_CC NAMES clang clang-14 DOC "clang, to compile MTIA device kernels")
find_program(MTIA_KERNEL_LD NAMES ld.lld ld.lld-14 DOC "ld.lld, to link MTIA device kernels")
set(MTIA_KERNEL_SDK_DIR ${mtia-emu_DATA_DIR}/kernels CACHE INTERNAL "")
set(MTIA_KERNEL_SDK_INCLUDE_DIRS ${mtia-emu_INCLUDE_DIR} ${mtia-emu_DATA_DIR}/kernels/include
    ${mtia-emu_DATA_DIR}/kernels/lib CACHE INTERNAL "")

function(mtia_add_kernel name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;INCLUDE_DIRECTORIES;COMPILE_OPTIONS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "mtia_add_kernel(${name}): unexpected arguments "
                        "'${arg_UNPARSED_ARGUMENTS}'; use mtia_add_kernel(NAME SOURCES file.c ...)")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "mtia_add_kernel(${name}): no SOURCES")
  endif()
  if(NOT MTIA_KERNEL_CC OR NOT MTIA_KERNEL_LD)
    message(FATAL_ERROR "mtia_add_kernel(${name}): device kernels need clang and ld.lld "
                        "(found '${MTIA_KERNEL_CC}' and '${MTIA_KERNEL_LD}'); install them "
                        "(Debian: clang lld) or set MTIA_KERNEL_CC and MTIA_KERNEL_LD")
  endif()
  # Relative folders are the caller's source folder's, as in target_include_directories: the
  # compiler runs in the binary folder.
  set(include_dirs)
  foreach(dir IN LISTS arg_INCLUDE_DIRECTORIES)
    cmake_path(ABSOLUTE_PATH dir BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
    list(APPEND include_dirs ${dir})
  endforeach()
  set(sdk ${MTIA_KERNEL_SDK_DIR})
  mtia_kernel_image(${name} TARGET ${name} SOURCES ${arg_SOURCES}
    RUNTIME ${sdk}/src/rt.c ${sdk}/lib/module_start.S
    INCLUDE_DIRS ${include_dirs} ${MTIA_KERNEL_SDK_INCLUDE_DIRS}
    FLAGS ${MTIA_KERNEL_FLAGS} ${arg_COMPILE_OPTIONS}
    LINK_SCRIPT ${sdk}/link.ld)
endfunction()
