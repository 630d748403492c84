#include "mtia/isa/error_record.h"

#include <cstring>
#include <string>

#include "mtia/isa/pe/kernel_meta.h"

namespace mtia::isa {
namespace {

bool printable(char c) {
  return c >= 0x20 && c <= 0x7e;
}

constexpr std::string_view kCut = "...";

}  // namespace

ErrorRecord make_error_record(uint64_t seq, uint64_t index, uint8_t opcode, ErrorCode error,
                              std::string_view text, std::optional<int64_t> exit_status) {
  ErrorRecord r{};
  r.magic = kErrorRecordMagic;
  r.version = kErrorRecordVersion;
  r.opcode = opcode;
  r.seq = seq;
  r.index = index;
  r.error = static_cast<uint16_t>(error);
  if (exit_status && *exit_status != 0 && error == ErrorCode::kKernelFault) {
    r.flags |= kErrorExitStatus;
    r.exit_status = *exit_status;
  }
  constexpr size_t kMax = kErrorTextBytes - 1;  // room for the terminating NUL
  size_t n = text.size();
  if (n > kMax) {
    r.flags |= kErrorTextTruncated;
    n = kMax - kCut.size();
  }
  for (size_t i = 0; i < n; ++i) r.text[i] = printable(text[i]) ? text[i] : '?';
  if (r.flags & kErrorTextTruncated) std::memcpy(r.text + n, kCut.data(), kCut.size());
  return r;
}

Result<ErrorRecord> decode_error_record(const void* data, size_t bytes) {
  if (bytes != kErrorRecordBytes) {
    return reject(ErrorCode::kBadDims, "an error record is " + std::to_string(kErrorRecordBytes) +
                                           " bytes, got " + std::to_string(bytes));
  }
  ErrorRecord r;
  std::memcpy(&r, data, sizeof r);
  if (r.magic != kErrorRecordMagic) {
    return reject(ErrorCode::kBadOpcode, "error record magic is " + std::to_string(r.magic) +
                                             ", not " + std::to_string(kErrorRecordMagic));
  }
  if (r.version != kErrorRecordVersion) {
    return reject(ErrorCode::kBadVersion, "error record version " + std::to_string(r.version));
  }
  if (r.flags & ~uint16_t{kErrorRecordFlagsMask}) {
    return reject(ErrorCode::kReservedNotZero,
                  "error record flags " + std::to_string(r.flags) + " set unknown bits");
  }
  if (r.reserved0 != 0 || r.reserved1 != 0 || r.reserved2[0] != 0 || r.reserved2[1] != 0 ||
      r.reserved2[2] != 0) {
    return reject(ErrorCode::kReservedNotZero, "error record reserved fields must be zero");
  }
  if (r.error == static_cast<uint16_t>(ErrorCode::kNone) ||
      r.error >= static_cast<uint16_t>(ErrorCode::kCount)) {
    return reject(ErrorCode::kReservedNotZero, "error record names error code " +
                                                   std::to_string(r.error) +
                                                   " (it must be a known code other than none)");
  }
  if (r.flags & kErrorExitStatus) {
    if (r.error != static_cast<uint16_t>(ErrorCode::kKernelFault) || r.exit_status == 0) {
      return reject(ErrorCode::kReservedNotZero,
                    "error record flags an exit status, but only a kernel fault with a non-zero "
                    "status has one");
    }
  } else if (r.exit_status != 0) {
    return reject(ErrorCode::kReservedNotZero,
                  "error record has an exit status without the kErrorExitStatus flag");
  }
  const void* nul = std::memchr(r.text, 0, kErrorTextBytes);
  if (nul == nullptr) {
    return reject(ErrorCode::kReservedNotZero, "error record text is not NUL-terminated");
  }
  const size_t len = static_cast<size_t>(static_cast<const char*>(nul) - r.text);
  for (size_t i = 0; i < len; ++i) {
    if (!printable(r.text[i])) {
      return reject(ErrorCode::kReservedNotZero,
                    "error record text byte " + std::to_string(i) + " is not printable ASCII");
    }
  }
  for (size_t i = len; i < kErrorTextBytes; ++i) {
    if (r.text[i] != 0) {
      return reject(
          ErrorCode::kReservedNotZero,
          "error record text has bytes after its terminating NUL (at " + std::to_string(i) + ")");
    }
  }
  return r;
}

std::string_view error_record_text(const ErrorRecord& record) {
  const void* nul = std::memchr(record.text, 0, kErrorTextBytes);
  return {record.text, nul == nullptr
                           ? kErrorTextBytes
                           : static_cast<size_t>(static_cast<const char*>(nul) - record.text)};
}

const char* kernel_status_name(int64_t status) {
  static_assert(MTIA_KSTATUS_BAD_ARG_BYTES == 1 && MTIA_KSTATUS_BAD_DTYPE == 2 &&
                    MTIA_KSTATUS_BAD_OP == 3 && MTIA_KSTATUS_BAD_SHAPE == 4 &&
                    MTIA_KSTATUS_NO_LOCAL_STORE == 5 && MTIA_KSTATUS_NO_KERNEL == 6,
                "the names below follow kernel_meta.h");
  switch (status) {
    case MTIA_KSTATUS_BAD_ARG_BYTES:
      return "bad argument block: not 8 bytes per argument of the kernel's signature";
    case MTIA_KSTATUS_BAD_DTYPE:
      return "bad dtype: a dtype or dtype pair the kernel does not take";
    case MTIA_KSTATUS_BAD_OP:
      return "bad op: an op code or flag the kernel does not know";
    case MTIA_KSTATUS_BAD_SHAPE:
      return "bad shape: a negative size or stride, a dim out of range or an empty reduced dim";
    case MTIA_KSTATUS_NO_LOCAL_STORE:
      return "local store too small for the kernel's smallest tiles";
    case MTIA_KSTATUS_NO_KERNEL:
      return "no kernel: the module's ELF entry was launched instead of a kernel's entry";
    default:
      return nullptr;
  }
}

}  // namespace mtia::isa
