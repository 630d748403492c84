# mtia_kernel_image(<name> TARGET <target> SOURCES <files...> RUNTIME <files...>
#                   INCLUDE_DIRS <dirs...> FLAGS <flags...> LINK_SCRIPT <file>)
#
# Compiles device kernel sources (C and assembly, for the PE's RV64IM core) with
# ${MTIA_KERNEL_CC} (clang) and links them with ${MTIA_KERNEL_LD} (ld.lld) and LINK_SCRIPT into
# ${CMAKE_CURRENT_BINARY_DIR}/<name>.elf, the RUNTIME files first. <target> is a custom target
# built by default whose ELF_PATH property names the image. Relative paths are taken from
# ${CMAKE_CURRENT_SOURCE_DIR}. Custom commands rather than a CMake language, because the host
# toolchain builds the host code of the same project.
#
# Shared by the build tree (kernels/CMakeLists.txt, the test kernels) and installations
# (mtia-emu-kernels.cmake).

# What every device kernel is compiled for: the PE's RV64IM control core, without an OS or a C
# library (torch.compile's generated kernels are compiled for it with flags of their own).
# Cached, so that functions called from any folder of the including project see it.
set(MTIA_KERNEL_TARGET_FLAGS
    --target=riscv64-unknown-elf -march=rv64im -mabi=lp64 -nostdlib -ffreestanding
    CACHE INTERNAL "code generation flags of MTIA device kernels")
# How every C kernel is compiled, in this tree and against an installation: optimised, with
# debug information (the sanitizer's reports name source lines), C99, warnings on. This tree's
# own kernels add -Werror.
set(MTIA_KERNEL_FLAGS ${MTIA_KERNEL_TARGET_FLAGS} -O2 -g -std=c99 -Wall -Wextra
    CACHE INTERNAL "compile flags of MTIA device kernels")

function(mtia_kernel_image name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TARGET;LINK_SCRIPT"
                        "SOURCES;RUNTIME;INCLUDE_DIRS;FLAGS")
  set(include_flags)
  foreach(dir IN LISTS arg_INCLUDE_DIRS)
    list(APPEND include_flags -I${dir})
  endforeach()
  # Ninja makes an output's folder itself; Makefile generators do not, so make it here.
  set(obj_dir ${CMAKE_CURRENT_BINARY_DIR}/obj/${name})
  file(MAKE_DIRECTORY ${obj_dir})
  set(objects)
  foreach(src IN LISTS arg_RUNTIME arg_SOURCES)
    get_filename_component(path ${src} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    get_filename_component(base ${src} NAME)
    set(obj ${obj_dir}/${base}.o)
    add_custom_command(
      OUTPUT ${obj}
      COMMAND ${MTIA_KERNEL_CC} ${arg_FLAGS} ${include_flags} -MD -MF ${obj}.d -c ${path} -o ${obj}
      DEPENDS ${path}
      DEPFILE ${obj}.d
      COMMENT "Compiling kernel ${name}: ${src}"
      VERBATIM)
    list(APPEND objects ${obj})
  endforeach()
  set(elf ${CMAKE_CURRENT_BINARY_DIR}/${name}.elf)
  add_custom_command(
    OUTPUT ${elf}
    COMMAND ${MTIA_KERNEL_LD} -T ${arg_LINK_SCRIPT} -o ${elf} ${objects}
    DEPENDS ${objects} ${arg_LINK_SCRIPT}
    COMMENT "Linking kernel ${name}.elf"
    VERBATIM)
  add_custom_target(${arg_TARGET} ALL DEPENDS ${elf})
  set_target_properties(${arg_TARGET} PROPERTIES ELF_PATH ${elf})
endfunction()
