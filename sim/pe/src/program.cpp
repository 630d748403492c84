#include "mtia/sim/pe/program.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "mtia/isa/pe/pe_ops.h"
#include "riscv_decode.h"

namespace mtia::sim::pe {
namespace {

isa::Failure bad(std::string reason) {
  return isa::reject(isa::ErrorCode::kUnsupported, "kernel image: " + std::move(reason));
}

bool inside(uint64_t addr, uint64_t bytes, uint64_t base, uint64_t size) {
  return addr >= base && addr - base <= size && bytes <= size - (addr - base);
}

}  // namespace

isa::Result<std::shared_ptr<const Program>> Program::create(const ElfImage& image) {
  auto body = std::make_shared<Body>();
  Body* const p = body.get();

  struct Span {
    uint64_t lo, hi;
  };
  std::vector<Span> spans;
  for (size_t i = 0; i < image.segments.size(); ++i) {
    const Segment& s = image.segments[i];
    const std::string where =
        fmt::format("segment {} [{:#x}, {:#x})", i, s.vaddr, s.vaddr + s.mem_bytes);
    if (s.bytes.size() > s.mem_bytes) return bad(where + " holds more file bytes than memory");
    if (s.writable && s.executable) {
      return bad(where +
                 " is writable and executable; link code and data into separate "
                 "segments (kernels/link.ld does)");
    }
    for (const Span& other : spans) {
      if (s.vaddr < other.hi && other.lo < s.vaddr + s.mem_bytes) {
        return bad(where + " overlaps another segment");
      }
    }
    spans.push_back({s.vaddr, s.vaddr + s.mem_bytes});

    // The window is checked before the segment is zero-filled to mem_bytes, which a malformed
    // module may set to anything.
    const bool in_image = inside(s.vaddr, s.mem_bytes, MTIA_PE_IMAGE_BASE, MTIA_PE_IMAGE_MAX_BYTES);
    const bool in_local = inside(s.vaddr, s.mem_bytes, MTIA_PE_LS_BASE, MTIA_PE_LS_MAX_BYTES);
    std::vector<uint8_t> bytes;
    if (in_image || in_local) {
      bytes = s.bytes;
      bytes.resize(s.mem_bytes, 0);
    }
    if (in_image) {
      if (s.executable && (s.vaddr % 4 != 0 || s.mem_bytes % 4 != 0)) {
        return bad(where + " is code but not 4-byte aligned in address and size");
      }
      p->image.push_back({s.vaddr, std::move(bytes), s.writable, s.executable});
    } else if (in_local) {
      if (s.executable) {
        return bad(where + " is code in the local store; code must be in the image window");
      }
      const uint64_t offset = s.vaddr - MTIA_PE_LS_BASE;
      p->local_end = std::max(p->local_end, offset + s.mem_bytes);
      p->local.push_back({offset, std::move(bytes)});
    } else {
      return bad(
          fmt::format("{} lies outside the image window [{:#x}, {:#x}) and the local-store window "
                      "[{:#x}, {:#x}); link with kernels/link.ld",
                      where, MTIA_PE_IMAGE_BASE, MTIA_PE_IMAGE_BASE + MTIA_PE_IMAGE_MAX_BYTES,
                      MTIA_PE_LS_BASE, MTIA_PE_LS_BASE + MTIA_PE_LS_MAX_BYTES));
    }
  }

  uint64_t code_lo = ~0ull;
  uint64_t code_hi = 0;
  for (const ImageSegment& s : p->image) {
    if (!s.executable) continue;
    code_lo = std::min(code_lo, s.base);
    code_hi = std::max(code_hi, s.base + s.bytes.size());
  }
  if (code_lo >= code_hi) return bad("has no executable segment");
  // Decode every word once; the image window is at most 1 MiB, so the table is too.
  p->code_base = code_lo;
  const uint64_t words = (code_hi - code_lo) / 4;
  p->code.assign(words, DecodedInsn{});  // op 0 = kFetchFault for the gaps
  p->raw.assign(words, 0);
  for (const ImageSegment& s : p->image) {
    if (!s.executable) continue;
    for (uint64_t off = 0; off + 4 <= s.bytes.size(); off += 4) {
      uint32_t w;
      std::memcpy(&w, s.bytes.data() + off, 4);
      const uint64_t index = (s.base + off - code_lo) / 4;
      p->raw[index] = w;
      p->code[index] = detail::decode(w);
    }
  }
  return enter(std::move(body), image.entry);
}

isa::Result<std::shared_ptr<const Program>> Program::with_entry(uint64_t entry) const {
  return enter(body_, entry);
}

isa::Result<std::shared_ptr<const Program>> Program::enter(std::shared_ptr<const Body> body,
                                                           uint64_t entry) {
  bool in_code = false;
  for (const ImageSegment& s : body->image) {
    if (s.executable && entry >= s.base && entry < s.base + s.bytes.size()) in_code = true;
  }
  if (!in_code || entry % 4 != 0) {
    return bad(
        fmt::format("entry point {:#x} is not an aligned address in an executable segment", entry));
  }
  std::shared_ptr<Program> p(new Program());
  p->entry_ = entry;
  p->body_ = std::move(body);
  return std::shared_ptr<const Program>(std::move(p));
}

}  // namespace mtia::sim::pe
