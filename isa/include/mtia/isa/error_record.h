// The error record: the device's own account of why a packet failed, in words, for the host.
//
// A completion record has room for an error code and two numbers; the reason behind them (the
// decoder's complaint about a malformed packet, the fault a kernel took on a PE) is a sentence.
// Each queue may have one error record in device memory: its address is the queue register
// reg::kQueueErrorRecord (0 = none, the default). When a packet of the queue fails, the
// firmware writes the record first and then the packet's completion record, so a driver that
// has read a failed completion finds the record already written. The record describes that
// packet when its seq and index equal the completion's (an older record describes an earlier
// failure). One record per queue is enough: a failed packet halts its queue, and the next
// failure can only come after the driver has reset it.
//
// Fixed-width, little-endian, kErrorRecordBytes bytes; decode_error_record rejects anything
// malformed with a reason, like the other decoders of isa/.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "mtia/isa/error_code.h"
#include "mtia/isa/result.h"

namespace mtia::isa {

static_assert(std::endian::native == std::endian::little, "isa/ formats are little-endian");

inline constexpr uint32_t kErrorRecordMagic = 0x5245'544D;  // the bytes "MTER"
inline constexpr uint8_t kErrorRecordVersion = 2;
inline constexpr size_t kErrorRecordBytes = 1024;
inline constexpr size_t kErrorTextBytes = 960;
inline constexpr uint64_t kErrorRecordAlign = 64;  // the record's device address is 64-aligned

// Bits of ErrorRecord::flags.
enum ErrorRecordFlags : uint16_t {
  // A kernel exited with a non-zero status (error kKernelFault): exit_status holds it.
  kErrorExitStatus = 1u << 0,
  // The description was longer than the text field and was cut (it ends with "...").
  kErrorTextTruncated = 1u << 1,
  kErrorRecordFlagsMask = kErrorExitStatus | kErrorTextTruncated,
};

struct ErrorRecord {
  uint32_t magic;         // kErrorRecordMagic
  uint8_t version;        // kErrorRecordVersion
  uint8_t opcode;         // the failed packet's opcode, as its completion record has it
  uint16_t flags;         // ErrorRecordFlags
  uint64_t seq;           // CompletionRecord::seq of the failed packet
  uint64_t index;         // CompletionRecord::index of the failed packet
  uint16_t error;         // CompletionRecord::error: an ErrorCode, never kNone
  uint16_t reserved0;     // zero
  uint32_t reserved1;     // zero
  int64_t exit_status;    // with kErrorExitStatus: the kernel's exit status (a0 at ECALL); else 0
  uint64_t reserved2[3];  // zero
  // What went wrong, for people: printable ASCII (0x20..0x7e), NUL-terminated and NUL-padded;
  // may be empty. For a kernel fault it names the PE, its row and column, the pc and the fault.
  char text[kErrorTextBytes];
};
static_assert(sizeof(ErrorRecord) == kErrorRecordBytes);
static_assert(offsetof(ErrorRecord, seq) == 8);
static_assert(offsetof(ErrorRecord, index) == 16);
static_assert(offsetof(ErrorRecord, error) == 24);
static_assert(offsetof(ErrorRecord, exit_status) == 32);
static_assert(offsetof(ErrorRecord, text) == 64);

// The record of a failed packet. `text` longer than kErrorTextBytes - 1 is cut, ending in
// "...", and flagged kErrorTextTruncated; bytes outside printable ASCII become '?'. An
// exit status is recorded (kErrorExitStatus) only when it is present and non-zero and the
// error is kKernelFault (the only error a kernel's exit status explains).
ErrorRecord make_error_record(uint64_t seq, uint64_t index, uint8_t opcode, ErrorCode error,
                              std::string_view text, std::optional<int64_t> exit_status = {});

// Decodes a record read from device memory. `bytes` must be kErrorRecordBytes. Rejects a bad
// magic or version, unknown flag bits, set reserved fields, an error code that is kNone or
// unknown, an exit status without its flag (or the flag on anything but a kernel fault with a
// non-zero status), and text that is not printable ASCII, NUL-terminated and NUL-padded.
Result<ErrorRecord> decode_error_record(const void* data, size_t bytes);

// The text of a decoded record (up to its first NUL).
std::string_view error_record_text(const ErrorRecord& record);

// A short description of a kernel exit status of the library ABI (MTIA_KSTATUS_* in
// isa/pe/kernel_meta.h), e.g. "bad dtype: a dtype or dtype pair the kernel does not take";
// nullptr for a status the ABI does not define (a kernel's own).
const char* kernel_status_name(int64_t status);

}  // namespace mtia::isa
