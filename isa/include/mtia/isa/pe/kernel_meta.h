/* Kernel metadata: what a kernel binary says about the kernels it holds, so the host can look
 * a kernel up by name and check a launch's arguments before it reaches the device.
 *
 * A kernel binary ("module") is a static RISC-V ELF64 image (docs/pe-isa.md) with any number
 * of kernels. Each kernel contributes one fixed-size record, mtia_kernel_meta, to the
 * non-allocated ELF section ".mtia.meta" (kernels/link.ld keeps it out of the loaded image);
 * the section is the records back to back. Kernels emit their record with MTIA_KERNEL()
 * from kernels/include/mtia_kernel.h. docs/kernels.md describes the kernel ABI in full.
 *
 * Launching kernel K of a module: the PE core starts at K's `entry` (a trampoline that calls
 * the kernel's C function and ECALLs with its return value) instead of the ELF entry point,
 * i.e. LaunchPacket::entry_offset = entry - MTIA_PE_IMAGE_BASE.
 *
 * The argument block (MTIA_PE_ARGS_BASE on every PE) is one 8-byte little-endian slot per
 * argument, in signature order:
 *   ptr    a device address (DRAM, SRAM; see address_map.h)
 *   i64    a signed 64-bit integer
 *   f32    an IEEE binary32 bit pattern in the low 4 bytes, upper 4 bytes zero
 *   f64    an IEEE binary64 bit pattern
 *   dtype  an enum mtia_pe_dtype code (pe_ops.h), zero-extended
 * so a kernel with n arguments takes exactly 8 * n argument bytes.
 *
 * Record fields (all little-endian, reserved fields and unused bytes zero):
 *   magic         MTIA_KMETA_MAGIC ("MTKM")
 *   version       MTIA_KMETA_VERSION
 *   record_bytes  sizeof(mtia_kernel_meta): lets a reader skip records of a later version
 *   flags         none defined: zero
 *   entry         core address of the kernel's entry: 4-byte aligned, in an executable segment
 *   name          NUL-terminated, NUL-padded; [A-Za-z_][A-Za-z0-9_]*, unique in the module
 *   signature     NUL-terminated, NUL-padded text: "name:kind" entries separated by single
 *                 spaces, kind one of ptr i64 f32 f64 dtype, names as above and unique;
 *                 "" for a kernel without arguments; at most MTIA_KMETA_MAX_ARGS entries
 *
 * C99 for the kernels (clang, riscv64) and C++20 for the host; the C++ part at the end is a
 * header-only parser that rejects malformed metadata with a reason.
 */
#ifndef MTIA_ISA_PE_KERNEL_META_H_
#define MTIA_ISA_PE_KERNEL_META_H_

#include <stddef.h>
#include <stdint.h>

#include "mtia/isa/pe/pe_ops.h"

#define MTIA_KMETA_SECTION ".mtia.meta"
#define MTIA_KMETA_MAGIC 0x4D4B544Du /* bytes 'M' 'T' 'K' 'M' */
#define MTIA_KMETA_VERSION 1
#define MTIA_KMETA_NAME_BYTES 64
#define MTIA_KMETA_SIGNATURE_BYTES 920
#define MTIA_KMETA_MAX_ARGS 64
#define MTIA_KMETA_ARG_SLOT_BYTES 8

/* Argument kinds, in the order of the signature's kind names. */
enum mtia_karg_kind {
  MTIA_KARG_INVALID = 0,
  MTIA_KARG_PTR = 1,   /* "ptr": device address */
  MTIA_KARG_I64 = 2,   /* "i64" */
  MTIA_KARG_F32 = 3,   /* "f32": bit pattern in the low 4 bytes */
  MTIA_KARG_F64 = 4,   /* "f64" */
  MTIA_KARG_DTYPE = 5, /* "dtype": enum mtia_pe_dtype */
  MTIA_KARG_KIND_COUNT
};

typedef struct mtia_kernel_meta {
  uint32_t magic;        /* MTIA_KMETA_MAGIC */
  uint16_t version;      /* MTIA_KMETA_VERSION */
  uint16_t record_bytes; /* sizeof(mtia_kernel_meta) */
  uint32_t flags;        /* zero */
  uint32_t reserved0;    /* zero */
  uint64_t entry;        /* core address of the entry trampoline */
  uint64_t reserved1[2]; /* zero */
  char name[MTIA_KMETA_NAME_BYTES];
  char signature[MTIA_KMETA_SIGNATURE_BYTES];
} mtia_kernel_meta;
MTIA_PE_STATIC_ASSERT(sizeof(mtia_kernel_meta) == 1024, kernel_meta_size);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_kernel_meta, entry) == 16, kernel_meta_entry_offset);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_kernel_meta, name) == 40, kernel_meta_name_offset);
MTIA_PE_STATIC_ASSERT(offsetof(mtia_kernel_meta, signature) == 104, kernel_meta_sig_offset);

/* Exit statuses of the library kernels (a0 at ECALL); 0 is success. A launch that ends with
 * one of these failed before writing any output. */
#define MTIA_KSTATUS_OK 0
#define MTIA_KSTATUS_BAD_ARG_BYTES 1  /* the argument block is not 8 bytes per argument */
#define MTIA_KSTATUS_BAD_DTYPE 2      /* a dtype (or dtype pair) the kernel does not support */
#define MTIA_KSTATUS_BAD_OP 3         /* an op code the kernel does not support */
#define MTIA_KSTATUS_BAD_SHAPE 4      /* a negative size or stride, or a dim out of range */
#define MTIA_KSTATUS_NO_LOCAL_STORE 5 /* the local store is too small for the kernel's tiles */
#define MTIA_KSTATUS_NO_KERNEL 6      /* the module's ELF entry was launched: use a kernel's */

#ifdef __cplusplus

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mtia/isa/result.h"

namespace mtia::isa {

enum class KernelArgKind : uint8_t {
  kPointer = MTIA_KARG_PTR,
  kI64 = MTIA_KARG_I64,
  kF32 = MTIA_KARG_F32,
  kF64 = MTIA_KARG_F64,
  kDtype = MTIA_KARG_DTYPE,
};

// "ptr", "i64", "f32", "f64", "dtype".
inline const char* kernel_arg_kind_name(KernelArgKind kind) {
  switch (kind) {
    case KernelArgKind::kPointer:
      return "ptr";
    case KernelArgKind::kI64:
      return "i64";
    case KernelArgKind::kF32:
      return "f32";
    case KernelArgKind::kF64:
      return "f64";
    case KernelArgKind::kDtype:
      return "dtype";
  }
  return "invalid";
}

struct KernelArg {
  std::string name;
  KernelArgKind kind = KernelArgKind::kI64;
};

struct KernelInfo {
  std::string name;
  uint64_t entry = 0;  // core address where the PE starts this kernel
  std::vector<KernelArg> args;

  // Bytes of the argument block this kernel expects.
  uint64_t arg_bytes() const { return args.size() * uint64_t{MTIA_KMETA_ARG_SLOT_BYTES}; }
  // Device-pointer arguments (the buffers a launch may touch, at most).
  size_t pointer_args() const {
    size_t n = 0;
    for (const KernelArg& a : args) n += a.kind == KernelArgKind::kPointer;
    return n;
  }
  // "name(out:ptr, n:i64)", for messages.
  std::string describe() const {
    std::string s = name + "(";
    for (size_t i = 0; i < args.size(); ++i) {
      if (i != 0) s += ", ";
      s += args[i].name + ":" + kernel_arg_kind_name(args[i].kind);
    }
    return s + ")";
  }
};

struct KernelModuleInfo {
  std::vector<KernelInfo> kernels;  // in section order

  const KernelInfo* find(std::string_view name) const {
    for (const KernelInfo& k : kernels) {
      if (k.name == name) return &k;
    }
    return nullptr;
  }
};

namespace kernel_meta_detail {

inline bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
inline bool is_ident_char(char c) {
  return is_ident_start(c) || (c >= '0' && c <= '9');
}
inline bool is_identifier(std::string_view s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  for (char c : s) {
    if (!is_ident_char(c)) return false;
  }
  return true;
}

// A NUL-terminated, NUL-padded text field: the text, or a rejection naming `what`.
inline Result<std::string> fixed_text(const char* field, size_t bytes, const std::string& what) {
  const void* nul = std::memchr(field, '\0', bytes);
  if (nul == nullptr) {
    return reject(ErrorCode::kBadDims,
                  what + " is not NUL-terminated within its " + std::to_string(bytes) + " bytes");
  }
  const size_t len = static_cast<size_t>(static_cast<const char*>(nul) - field);
  for (size_t i = len; i < bytes; ++i) {
    if (field[i] != '\0') {
      return reject(
          ErrorCode::kReservedNotZero,
          what + " has non-zero bytes after its terminating NUL (byte " + std::to_string(i) + ")");
    }
  }
  return std::string(field, len);
}

template <typename T>
bool read_le(std::span<const uint8_t> bytes, uint64_t offset, T& out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(&out, bytes.data() + offset, sizeof(T));  // ELF and records are little-endian
  return true;
}

}  // namespace kernel_meta_detail

// Parses a signature ("out:ptr n:i64 dtype:dtype") into its arguments.
inline Result<std::vector<KernelArg>> parse_kernel_signature(std::string_view sig) {
  using kernel_meta_detail::is_identifier;
  std::vector<KernelArg> args;
  if (sig.empty()) return args;
  size_t pos = 0;
  while (true) {
    const size_t end = std::min(sig.find(' ', pos), sig.size());
    const std::string_view entry = sig.substr(pos, end - pos);
    const std::string where =
        "signature entry " + std::to_string(args.size()) + " ('" + std::string(entry) + "')";
    const size_t colon = entry.find(':');
    if (colon == std::string_view::npos) {
      return reject(ErrorCode::kBadOpcode,
                    where + " is not 'name:kind' (entries are separated by single spaces)");
    }
    const std::string_view name = entry.substr(0, colon);
    const std::string_view kind = entry.substr(colon + 1);
    if (!is_identifier(name)) {
      return reject(ErrorCode::kBadOpcode,
                    where + " has an argument name that is not an identifier");
    }
    KernelArg arg;
    arg.name = std::string(name);
    if (kind == "ptr") {
      arg.kind = KernelArgKind::kPointer;
    } else if (kind == "i64") {
      arg.kind = KernelArgKind::kI64;
    } else if (kind == "f32") {
      arg.kind = KernelArgKind::kF32;
    } else if (kind == "f64") {
      arg.kind = KernelArgKind::kF64;
    } else if (kind == "dtype") {
      arg.kind = KernelArgKind::kDtype;
    } else {
      return reject(ErrorCode::kBadOpcode, where + " has kind '" + std::string(kind) +
                                               "'; the kinds are ptr, i64, f32, f64 and dtype");
    }
    for (const KernelArg& prev : args) {
      if (prev.name == arg.name) {
        return reject(ErrorCode::kBadOpcode,
                      where + " repeats the argument name '" + arg.name + "'");
      }
    }
    args.push_back(std::move(arg));
    if (args.size() > MTIA_KMETA_MAX_ARGS) {
      return reject(ErrorCode::kBadDims, "the signature has more than " +
                                             std::to_string(MTIA_KMETA_MAX_ARGS) + " arguments");
    }
    if (end == sig.size()) break;
    pos = end + 1;
  }
  return args;
}

// Parses one record. Checks the fields' own rules; the entry's place in the image is checked
// by parse_kernel_module, which knows the segments.
inline Result<KernelInfo> parse_kernel_meta_record(std::span<const uint8_t> bytes) {
  using kernel_meta_detail::fixed_text;
  if (bytes.size() < sizeof(mtia_kernel_meta)) {
    return reject(ErrorCode::kBadDims, "kernel metadata record has " +
                                           std::to_string(bytes.size()) + " bytes, expected " +
                                           std::to_string(sizeof(mtia_kernel_meta)));
  }
  mtia_kernel_meta m;
  std::memcpy(&m, bytes.data(), sizeof m);
  if (m.magic != MTIA_KMETA_MAGIC) {
    return reject(ErrorCode::kBadVersion,
                  "kernel metadata record does not start with the magic 'MTKM' (is this a "
                  "kernel binary built with MTIA_KERNEL?)");
  }
  if (m.version != MTIA_KMETA_VERSION) {
    return reject(ErrorCode::kBadVersion, "kernel metadata version " + std::to_string(m.version) +
                                              " is not supported (this reader speaks version " +
                                              std::to_string(MTIA_KMETA_VERSION) +
                                              "); rebuild the kernels");
  }
  if (m.record_bytes != sizeof(mtia_kernel_meta)) {
    return reject(ErrorCode::kBadDims, "kernel metadata record_bytes is " +
                                           std::to_string(m.record_bytes) + ", expected " +
                                           std::to_string(sizeof(mtia_kernel_meta)));
  }
  if (m.flags != 0 || m.reserved0 != 0 || m.reserved1[0] != 0 || m.reserved1[1] != 0) {
    return reject(ErrorCode::kReservedNotZero,
                  "kernel metadata flags or reserved fields are not zero");
  }
  auto name = fixed_text(m.name, sizeof m.name, "kernel name");
  if (!name) return name.error();
  if (!kernel_meta_detail::is_identifier(name.value())) {
    return reject(ErrorCode::kBadOpcode, "kernel name '" + name.value() + "' is not an identifier");
  }
  auto sig =
      fixed_text(m.signature, sizeof m.signature, "signature of kernel '" + name.value() + "'");
  if (!sig) return sig.error();
  auto args = parse_kernel_signature(sig.value());
  if (!args) {
    return reject(args.error().code, "kernel '" + name.value() + "': " + args.error().reason);
  }
  if (m.entry % 4 != 0) {
    return reject(ErrorCode::kMisaligned, "kernel '" + name.value() + "' entry " +
                                              std::to_string(m.entry) + " is not 4-byte aligned");
  }
  KernelInfo info;
  info.name = std::move(name.value());
  info.entry = m.entry;
  info.args = std::move(args.value());
  return info;
}

// Parses the contents of a ".mtia.meta" section: records back to back, unique names.
inline Result<std::vector<KernelInfo>> parse_kernel_meta_section(std::span<const uint8_t> bytes) {
  constexpr size_t kRecord = sizeof(mtia_kernel_meta);
  if (bytes.size() % kRecord != 0) {
    return reject(ErrorCode::kBadDims,
                  "the " MTIA_KMETA_SECTION " section has " + std::to_string(bytes.size()) +
                      " bytes, not a multiple of the " + std::to_string(kRecord) + "-byte record");
  }
  std::vector<KernelInfo> kernels;
  for (size_t off = 0; off < bytes.size(); off += kRecord) {
    auto k = parse_kernel_meta_record(bytes.subspan(off, kRecord));
    if (!k) {
      return reject(k.error().code, "record " + std::to_string(off / kRecord) + " of " +
                                        MTIA_KMETA_SECTION ": " + k.error().reason);
    }
    for (const KernelInfo& prev : kernels) {
      if (prev.name == k.value().name) {
        return reject(ErrorCode::kBadOpcode,
                      "kernel '" + prev.name + "' is defined twice in the module");
      }
    }
    kernels.push_back(std::move(k.value()));
  }
  return kernels;
}

// Finds the ".mtia.meta" section of an ELF64 little-endian file and parses it; checks that
// every kernel's entry lies in an executable PT_LOAD segment. A file without the section is
// rejected (it has no kernels the host could look up).
inline Result<KernelModuleInfo> parse_kernel_module(std::span<const uint8_t> elf) {
  using kernel_meta_detail::read_le;
  if (elf.size() < 64 || std::memcmp(elf.data(),
                                     "\x7f"
                                     "ELF",
                                     4) != 0) {
    return reject(ErrorCode::kBadVersion, "kernel module is not an ELF file");
  }
  if (elf[4] != 2 || elf[5] != 1) {
    return reject(ErrorCode::kBadVersion, "kernel module is not a little-endian ELF64 file");
  }
  uint64_t phoff = 0, shoff = 0;
  uint16_t phentsize = 0, phnum = 0, shentsize = 0, shnum = 0, shstrndx = 0;
  read_le(elf, 32, phoff);
  read_le(elf, 40, shoff);
  read_le(elf, 54, phentsize);
  read_le(elf, 56, phnum);
  read_le(elf, 58, shentsize);
  read_le(elf, 60, shnum);
  read_le(elf, 62, shstrndx);
  // Every loadable segment must fit in the PE's image or local-store window, whatever its
  // sizes claim: a segment is zero-filled up to p_memsz when a PE loads it.
  for (uint16_t i = 0; i < phnum && phentsize >= 56; ++i) {
    const uint64_t at = phoff + uint64_t{i} * phentsize;
    uint32_t type = 0;
    uint64_t vaddr = 0, filesz = 0, memsz = 0;
    if (!read_le(elf, at, type) || !read_le(elf, at + 16, vaddr) ||
        !read_le(elf, at + 32, filesz) || !read_le(elf, at + 40, memsz)) {
      return reject(ErrorCode::kExtentOverflow,
                    "kernel module's program headers lie outside the file");
    }
    if (type != 1 /* PT_LOAD */ || memsz == 0) continue;
    const auto fits = [&](uint64_t base, uint64_t bytes) {
      return vaddr >= base && vaddr - base <= bytes && memsz <= bytes - (vaddr - base);
    };
    if (filesz > memsz || !(fits(MTIA_PE_IMAGE_BASE, MTIA_PE_IMAGE_MAX_BYTES) ||
                            fits(MTIA_PE_LS_BASE, MTIA_PE_LS_MAX_BYTES))) {
      return reject(ErrorCode::kExtentOverflow,
                    "kernel module segment " + std::to_string(i) + " (address " +
                        std::to_string(vaddr) + ", " + std::to_string(memsz) +
                        " bytes in memory, " + std::to_string(filesz) +
                        " in the file) does not fit in the PE's 1 MiB image window or its "
                        "local-store window; link with kernels/link.ld");
    }
  }
  if (shnum == 0 || shentsize < 64 || shstrndx >= shnum) {
    return reject(ErrorCode::kBadDims, "kernel module has no usable section header table");
  }
  // A section header, and whether its bytes lie inside the file. A NOBITS section (.bss,
  // .lstore) has none, whatever its offset and size say: `llvm-objcopy --strip-debug` leaves
  // its offset past the end of the file.
  auto section = [&](uint16_t i, uint32_t& name, uint32_t& type, uint64_t& off,
                     uint64_t& size) -> bool {
    const uint64_t at = shoff + uint64_t{i} * shentsize;
    if (!(read_le(elf, at, name) && read_le(elf, at + 4, type) && read_le(elf, at + 24, off) &&
          read_le(elf, at + 32, size))) {
      return false;
    }
    if (type == 8 /* SHT_NOBITS */) {
      off = size = 0;
      return true;
    }
    return off <= elf.size() && size <= elf.size() - off;
  };
  uint32_t str_name = 0, str_type = 0;
  uint64_t str_off = 0, str_size = 0;
  if (!section(shstrndx, str_name, str_type, str_off, str_size)) {
    return reject(ErrorCode::kExtentOverflow,
                  "kernel module's section-name table lies outside the file");
  }
  const std::string_view names(reinterpret_cast<const char*>(elf.data() + str_off), str_size);
  std::span<const uint8_t> meta;
  bool found = false;
  for (uint16_t i = 0; i < shnum; ++i) {
    uint32_t name = 0, type = 0;
    uint64_t off = 0, size = 0;
    if (!section(i, name, type, off, size)) {
      return reject(ErrorCode::kExtentOverflow,
                    "section " + std::to_string(i) + " of the kernel module lies outside the file");
    }
    if (name >= names.size()) continue;
    const std::string_view sname = names.substr(name, names.find('\0', name) - name);
    if (sname == MTIA_KMETA_SECTION && type == 1 /* SHT_PROGBITS */) {
      meta = elf.subspan(off, size);
      found = true;
      break;
    }
  }
  if (!found) {
    return reject(ErrorCode::kBadOpcode,
                  "kernel module has no " MTIA_KMETA_SECTION
                  " section: declare its kernels with MTIA_KERNEL and link with kernels/link.ld");
  }
  auto kernels = parse_kernel_meta_section(meta);
  if (!kernels) return kernels.error();
  // Every entry must be code the core can execute.
  for (const KernelInfo& k : kernels.value()) {
    bool in_code = false;
    for (uint16_t i = 0; i < phnum && phentsize >= 56; ++i) {
      const uint64_t at = phoff + uint64_t{i} * phentsize;
      uint32_t type = 0, flags = 0;
      uint64_t vaddr = 0, filesz = 0;
      if (!read_le(elf, at, type) || !read_le(elf, at + 4, flags) ||
          !read_le(elf, at + 16, vaddr) || !read_le(elf, at + 32, filesz)) {
        return reject(ErrorCode::kExtentOverflow,
                      "kernel module's program headers lie outside the file");
      }
      if (type == 1 /* PT_LOAD */ && (flags & 1) /* PF_X */ && k.entry >= vaddr &&
          k.entry - vaddr < filesz) {
        in_code = true;
      }
    }
    if (!in_code) {
      return reject(ErrorCode::kDeviceAddressFault,
                    "kernel '" + k.name + "' entry " + std::to_string(k.entry) +
                        " is not inside an executable segment of the module");
    }
  }
  KernelModuleInfo module;
  module.kernels = std::move(kernels.value());
  return module;
}

}  // namespace mtia::isa

#endif /* __cplusplus */

#endif /* MTIA_ISA_PE_KERNEL_META_H_ */
