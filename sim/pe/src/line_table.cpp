#include "mtia/sim/pe/line_table.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace mtia::sim::pe {
namespace {

isa::Failure bad(std::string reason) {
  return isa::reject(isa::ErrorCode::kUnsupported, "kernel ELF line table: " + std::move(reason));
}

// A bounded little-endian reader over one section: every read checks the end, and a short read
// leaves `ok` false (callers test it once per record, not per field).
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  bool ok() const { return ok_; }
  size_t offset() const { return at_; }
  size_t left() const { return ok_ ? bytes_.size() - at_ : 0; }
  std::span<const uint8_t> bytes() const { return bytes_; }

  uint64_t fixed(size_t n) {  // n <= 8
    if (!take(n)) return 0;
    uint64_t v = 0;
    std::memcpy(&v, bytes_.data() + at_ - n, n);  // the host is little-endian (isa/)
    return v;
  }
  uint64_t uleb() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const uint64_t b = fixed(1);
      if (!ok_) return 0;
      if (shift < 64) v |= (b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
  }
  int64_t sleb() {
    uint64_t v = 0;
    int shift = 0;
    uint64_t b = 0;
    do {
      b = fixed(1);
      if (!ok_) return 0;
      if (shift < 64) v |= (b & 0x7f) << shift;
      shift += 7;
    } while ((b & 0x80) != 0);
    if (shift < 64 && (b & 0x40) != 0) v |= ~uint64_t{0} << shift;
    return static_cast<int64_t>(v);
  }
  std::string_view cstr() {
    if (!ok_) return {};
    const auto* start = reinterpret_cast<const char*>(bytes_.data() + at_);
    const size_t n = strnlen(start, bytes_.size() - at_);
    if (n == bytes_.size() - at_) {
      ok_ = false;
      return {};
    }
    at_ += n + 1;
    return {start, n};
  }
  void skip(uint64_t n) {
    if (n > left()) {
      ok_ = false;
      return;
    }
    at_ += n;
  }

 private:
  bool take(size_t n) {
    if (!ok_ || n > bytes_.size() - at_) {
      ok_ = false;
      return false;
    }
    at_ += n;
    return true;
  }
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
  bool ok_ = true;
};

// The NUL-terminated string at `offset` of a string section, or "" if there is none.
std::string_view string_at(std::span<const uint8_t> section, uint64_t offset) {
  if (offset >= section.size()) return {};
  const auto* s = reinterpret_cast<const char*>(section.data() + offset);
  return {s, strnlen(s, section.size() - offset)};
}

uint32_t get_u32(std::span<const uint8_t> bytes, size_t at) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

// Line arithmetic of a damaged table may overflow: it wraps (and the row is then dropped as
// out of range) instead of being undefined.
int64_t wrapping_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

std::string join(std::string_view dir, std::string_view name) {
  if (name.empty() || name.front() == '/' || dir.empty()) return std::string(name);
  std::string path(dir);
  if (path.back() != '/') path += '/';
  return path.append(name);
}

// DWARF constants used here (DWARF 5, sections 6.2 and 7.5.5).
constexpr uint8_t kLnsCopy = 1, kLnsAdvancePc = 2, kLnsAdvanceLine = 3, kLnsSetFile = 4,
                  kLnsConstAddPc = 8, kLnsFixedAdvancePc = 9;
constexpr uint8_t kLneEndSequence = 1, kLneSetAddress = 2, kLneDefineFile = 3;
constexpr uint64_t kLnctPath = 1, kLnctDirectoryIndex = 2;
constexpr uint64_t kFormBlock = 0x09, kFormData1 = 0x0b, kFormData2 = 0x05, kFormData4 = 0x06,
                   kFormData8 = 0x07, kFormData16 = 0x1e, kFormString = 0x08, kFormStrp = 0x0e,
                   kFormLineStrp = 0x1f, kFormUdata = 0x0f, kFormSdata = 0x0d, kFormBlock1 = 0x0a,
                   kFormBlock2 = 0x03, kFormBlock4 = 0x04, kFormStrx = 0x1a, kFormStrx1 = 0x25,
                   kFormStrx2 = 0x26, kFormStrx3 = 0x27, kFormStrx4 = 0x28;

struct Sections {
  std::span<const uint8_t> line, line_str, str;
};

// One attribute value of a DWARF 5 directory or file entry: a string, a number, or skipped.
struct FormValue {
  std::string_view text;
  uint64_t number = 0;
};

bool read_form(Reader& r, uint64_t form, bool dwarf64, const Sections& s, FormValue& out) {
  const size_t offset_bytes = dwarf64 ? 8 : 4;
  switch (form) {
    case kFormString:
      out.text = r.cstr();
      break;
    case kFormLineStrp:
      out.text = string_at(s.line_str, r.fixed(offset_bytes));
      break;
    case kFormStrp:
      out.text = string_at(s.str, r.fixed(offset_bytes));
      break;
    case kFormUdata:
      out.number = r.uleb();
      break;
    case kFormSdata:
      out.number = static_cast<uint64_t>(r.sleb());
      break;
    case kFormData1:
    case kFormStrx1:
      out.number = r.fixed(1);
      break;
    case kFormData2:
    case kFormStrx2:
      out.number = r.fixed(2);
      break;
    case kFormStrx3:
      out.number = r.fixed(3);
      break;
    case kFormData4:
    case kFormStrx4:
      out.number = r.fixed(4);
      break;
    case kFormData8:
      out.number = r.fixed(8);
      break;
    case kFormStrx:
      out.number = r.uleb();
      break;
    case kFormData16:
      r.skip(16);
      break;
    case kFormBlock:
      r.skip(r.uleb());
      break;
    case kFormBlock1:
      r.skip(r.fixed(1));
      break;
    case kFormBlock2:
      r.skip(r.fixed(2));
      break;
    case kFormBlock4:
      r.skip(r.fixed(4));
      break;
    default:
      return false;  // a form this reader does not know: its size is unknown
  }
  return r.ok();
}

// A DWARF 5 directory or file name table: `paths` (joined to their directory for files).
isa::Status read_entry_table(Reader& r, bool dwarf64, const Sections& s,
                             const std::vector<std::string>* dirs, std::vector<std::string>& out) {
  const uint64_t nformats = r.fixed(1);
  std::vector<std::pair<uint64_t, uint64_t>> formats;  // (content type, form)
  for (uint64_t i = 0; i < nformats && r.ok(); ++i) {
    const uint64_t type = r.uleb();
    formats.emplace_back(type, r.uleb());
  }
  const uint64_t count = r.uleb();
  if (!r.ok() || count > r.left()) return bad("entry table runs past the end of its unit");
  for (uint64_t i = 0; i < count; ++i) {
    std::string_view path;
    uint64_t dir = 0;
    for (const auto& [type, form] : formats) {
      FormValue v;
      if (!read_form(r, form, dwarf64, s, v)) {
        return bad(
            fmt::format("entry table uses form 0x{:x}, which this reader does not know, "
                        "or runs past its unit",
                        form));
      }
      if (type == kLnctPath) path = v.text;
      if (type == kLnctDirectoryIndex) dir = v.number;
    }
    out.push_back(dirs != nullptr && dir < dirs->size() ? join((*dirs)[dir], path)
                                                        : std::string(path));
  }
  return isa::Status{};
}

struct Row {
  uint64_t address = 0;
  uint32_t file = 0;  // into the table's files_
  uint32_t line = 0;
};

}  // namespace

isa::Result<LineTable> LineTable::from_elf(std::span<const uint8_t> file) {
  // The section header table and the sections named here.
  if (file.size() < 64) return bad("shorter than an ELF64 header");
  Reader eh(file);
  eh.skip(40);
  const uint64_t shoff = eh.fixed(8);
  eh.skip(10);
  const uint64_t shentsize = eh.fixed(2), shnum = eh.fixed(2), shstrndx = eh.fixed(2);
  LineTable table;
  if (shoff == 0 || shnum == 0) return table;  // no sections: no debug information
  if (shentsize != 64 || shoff > file.size() || shnum > (file.size() - shoff) / 64 ||
      shstrndx >= shnum) {
    return bad("the section header table is not a valid ELF64 table inside the file");
  }
  auto section = [&](uint64_t i) -> std::pair<uint32_t, std::span<const uint8_t>> {
    Reader sh(file.subspan(shoff + i * 64, 64));
    const auto name = static_cast<uint32_t>(sh.fixed(4));
    const uint64_t type = sh.fixed(4);
    sh.skip(16);
    const uint64_t off = sh.fixed(8), size = sh.fixed(8);
    constexpr uint64_t kShtNobits = 8;
    if (type == kShtNobits || off > file.size() || size > file.size() - off) return {name, {}};
    return {name, file.subspan(off, size)};
  };
  const std::span<const uint8_t> names = section(shstrndx).second;
  Sections s;
  bool has_line = false;
  for (uint64_t i = 0; i < shnum; ++i) {
    const auto [name, bytes] = section(i);
    const std::string_view n = string_at(names, name);
    // The functions of the symbol table (SHT_SYMTAB: 24-byte entries, STT_FUNC with a size).
    constexpr uint32_t kShtSymtab = 2;
    constexpr uint8_t kSttFunc = 2;
    if (get_u32(file, shoff + i * 64 + 4) == kShtSymtab) {
      for (size_t at = 0; at + 24 <= bytes.size(); at += 24) {
        Reader sym(bytes.subspan(at, 24));
        sym.skip(4);
        const uint64_t info = sym.fixed(1);
        sym.skip(3);
        const uint64_t value = sym.fixed(8), size = sym.fixed(8);
        if ((info & 0xf) == kSttFunc && size > 0 && value + size > value) {
          table.functions_.push_back({value, value + size});
        }
      }
    }
    if (n == ".debug_line") {
      s.line = bytes;
      has_line = true;
    } else if (n == ".debug_line_str") {
      s.line_str = bytes;
    } else if (n == ".debug_str") {
      s.str = bytes;
    }
  }
  std::sort(table.functions_.begin(), table.functions_.end(),
            [](const Function& a, const Function& b) { return a.lo < b.lo; });
  if (!has_line) return table;

  std::vector<Row> rows;
  std::vector<std::pair<size_t, size_t>> sequences;  // [first, last] row of each sequence
  Reader unit_reader(s.line);
  while (unit_reader.left() > 0) {
    const size_t unit_at = unit_reader.offset();
    uint64_t length = unit_reader.fixed(4);
    const bool dwarf64 = length == 0xffffffff;
    if (dwarf64) length = unit_reader.fixed(8);
    if (!unit_reader.ok() || length > unit_reader.left()) {
      return bad(fmt::format("the unit at offset {} runs past the end of .debug_line", unit_at));
    }
    Reader r(s.line.subspan(unit_reader.offset(), length));
    unit_reader.skip(length);
    const uint64_t version = r.fixed(2);
    if (version < 2 || version > 5) {
      return bad(fmt::format("the unit at offset {} is DWARF version {}; this reader reads 2 to 5",
                             unit_at, version));
    }
    uint64_t address_bytes = 8;
    if (version >= 5) {
      address_bytes = r.fixed(1);
      r.skip(1);  // segment selector size
    }
    const uint64_t header_length = r.fixed(dwarf64 ? 8 : 4);
    const size_t program_at = r.offset() + header_length;
    const uint64_t min_inst = r.fixed(1);
    if (version >= 4) r.skip(1);  // maximum operations per instruction: 1 on RISC-V
    r.skip(1);                    // default is_stmt
    const auto line_base = static_cast<int8_t>(r.fixed(1));
    const uint64_t line_range = r.fixed(1), opcode_base = r.fixed(1);
    std::vector<uint8_t> arg_counts(opcode_base);
    for (uint64_t i = 1; i < opcode_base; ++i) arg_counts[i] = static_cast<uint8_t>(r.fixed(1));
    if (!r.ok() || line_range == 0 || opcode_base == 0 || program_at > r.bytes().size()) {
      return bad(fmt::format("the header of the unit at offset {} is malformed", unit_at));
    }
    // The unit's files, as indices into table.files_; version 5 counts from 0, earlier from 1.
    std::vector<std::string> dirs, unit_files;
    if (version >= 5) {
      if (isa::Status st = read_entry_table(r, dwarf64, s, nullptr, dirs); !st) return st.error();
      // Directories after the first may be relative to it (the compilation directory).
      for (size_t i = 1; i < dirs.size(); ++i) dirs[i] = join(dirs[0], dirs[i]);
      if (isa::Status st = read_entry_table(r, dwarf64, s, &dirs, unit_files); !st) {
        return st.error();
      }
    } else {
      dirs.emplace_back();  // directory 0: the compilation directory, not recorded here
      for (std::string_view d = r.cstr(); r.ok() && !d.empty(); d = r.cstr()) dirs.emplace_back(d);
      unit_files.emplace_back();  // file 0 is not used before version 5
      for (std::string_view f = r.cstr(); r.ok() && !f.empty(); f = r.cstr()) {
        const uint64_t dir = r.uleb();
        r.uleb();  // modification time
        r.uleb();  // length
        unit_files.push_back(dir < dirs.size() ? join(dirs[dir], f) : std::string(f));
      }
    }
    if (!r.ok())
      return bad(fmt::format("the file table of the unit at offset {} is malformed", unit_at));
    const auto first_file = static_cast<uint32_t>(table.files_.size());
    for (std::string& f : unit_files) table.files_.push_back(std::move(f));
    auto file_id = [&](uint64_t f) {
      return f < table.files_.size() - first_file ? first_file + static_cast<uint32_t>(f)
                                                  : UINT32_MAX;
    };

    // The line number program (DWARF 5, 6.2.5).
    r = Reader(r.bytes());
    r.skip(program_at);
    uint64_t address = 0, file = 1;
    int64_t line = 1;
    size_t sequence_start = rows.size();
    auto emit = [&] {
      rows.push_back({address, file_id(file),
                      line > 0 && line <= UINT32_MAX ? static_cast<uint32_t>(line) : 0});
    };
    while (r.left() > 0) {
      const uint64_t op = r.fixed(1);
      if (op >= opcode_base) {  // a special opcode: advance address and line, then a row
        const uint64_t adjusted = op - opcode_base;
        address += adjusted / line_range * min_inst;
        line = wrapping_add(line, line_base + static_cast<int64_t>(adjusted % line_range));
        emit();
      } else if (op == 0) {  // an extended opcode
        const uint64_t len = r.uleb();
        if (!r.ok() || len == 0 || len > r.left()) break;
        const size_t next = r.offset() + len;
        const uint64_t sub = r.fixed(1);
        if (sub == kLneEndSequence) {
          emit();
          if (rows.size() > sequence_start) sequences.emplace_back(sequence_start, rows.size() - 1);
          sequence_start = rows.size();
          address = 0, file = 1, line = 1;
        } else if (sub == kLneSetAddress) {
          address = r.fixed(std::min<uint64_t>(len - 1, address_bytes));
        } else if (sub == kLneDefineFile) {
          const std::string_view f = r.cstr();
          const uint64_t dir = r.uleb();
          table.files_.push_back(dir < dirs.size() ? join(dirs[dir], f) : std::string(f));
        }
        r = Reader(r.bytes());
        r.skip(next);
      } else if (op == kLnsCopy) {
        emit();
      } else if (op == kLnsAdvancePc) {
        address += r.uleb() * min_inst;
      } else if (op == kLnsAdvanceLine) {
        line = wrapping_add(line, r.sleb());
      } else if (op == kLnsSetFile) {
        file = r.uleb();
      } else if (op == kLnsConstAddPc) {
        address += (255 - opcode_base) / line_range * min_inst;
      } else if (op == kLnsFixedAdvancePc) {
        address += r.fixed(2);
      } else {
        for (uint8_t i = 0; i < arg_counts[op]; ++i) r.uleb();  // operands of no interest here
      }
    }
    if (!r.ok()) {
      return bad(fmt::format("the line program of the unit at offset {} is truncated", unit_at));
    }
  }

  // A row covers the addresses up to the next row of its sequence.
  for (const auto& [first, last] : sequences) {
    for (size_t i = first; i < last; ++i) {
      const Row& a = rows[i];
      if (a.address < rows[i + 1].address && a.line != 0 && a.file != UINT32_MAX) {
        table.ranges_.push_back({a.address, rows[i + 1].address, a.file, a.line});
      }
    }
  }
  std::stable_sort(table.ranges_.begin(), table.ranges_.end(),
                   [](const Range& a, const Range& b) { return a.lo < b.lo; });
  // Overlaps (sequences that cover the same code twice) keep the first range.
  size_t kept = 0;
  for (const Range& range : table.ranges_) {
    if (kept > 0 && range.lo < table.ranges_[kept - 1].hi) continue;
    table.ranges_[kept++] = range;
  }
  table.ranges_.resize(kept);
  return table;
}

std::optional<SourceLine> LineTable::find(uint64_t pc) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), pc,
                             [](uint64_t p, const Range& r) { return p < r.lo; });
  if (it == ranges_.begin()) return std::nullopt;
  --it;
  if (pc >= it->hi) return std::nullopt;
  return SourceLine{files_[it->file], it->line};
}

const LineTable::Function* LineTable::function_at(uint64_t pc) const {
  auto it = std::upper_bound(functions_.begin(), functions_.end(), pc,
                             [](uint64_t p, const Function& f) { return p < f.lo; });
  if (it == functions_.begin()) return nullptr;
  --it;
  return pc < it->hi ? &*it : nullptr;
}

std::string LineTable::place(uint64_t pc, int path_parts) const {
  std::optional<SourceLine> source = find(pc);
  if (!source) return {};
  std::string_view file = source->file;
  size_t cut = file.size();
  for (int i = 0; i < path_parts && cut != std::string_view::npos && cut > 0; ++i) {
    cut = file.rfind('/', cut - 1);
  }
  if (cut != std::string_view::npos && cut < file.size()) file.remove_prefix(cut + 1);
  return fmt::format("{}:{}", file, source->line);
}

std::string LineTable::annotate(const std::string& text, std::span<const Frame> frames,
                                int path_parts) const {
  if (empty()) return text;
  // The call that led to a frame's pc: the instruction before ra, when ra is in another
  // function (a function that has called nothing since its entry, or a tail call's caller).
  auto caller = [&](const Frame& f) -> std::string {
    if (f.ra < 4) return {};
    const Function* here = function_at(f.pc);
    const Function* there = function_at(f.ra - 4);
    if (here == nullptr || there == nullptr || here == there) return {};
    return place(f.ra - 4, path_parts);
  };
  std::vector<bool> matched(frames.size(), false);
  static constexpr std::string_view kPc = "pc 0x";
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(kPc); at != std::string::npos; at = text.find(kPc, from)) {
    size_t end = at + kPc.size();
    uint64_t pc = 0;
    while (end < text.size() && std::isxdigit(static_cast<unsigned char>(text[end])) &&
           end - at - kPc.size() < 16) {
      const char c = text[end++];
      pc = pc * 16 + static_cast<uint64_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    out.append(text, from, end - from);
    from = end;
    if (end == at + kPc.size()) continue;
    const std::string here = place(pc, path_parts);
    if (here.empty()) continue;
    std::string from;
    for (size_t i = 0; i < frames.size(); ++i) {
      if (!matched[i] && frames[i].pc == pc) {
        matched[i] = true;
        from = caller(frames[i]);
        break;
      }
    }
    out += from.empty() ? fmt::format(" ({})", here)
                        : fmt::format(" ({}, called from {})", here, from);
  }
  out.append(text, from, std::string::npos);
  return out;
}

}  // namespace mtia::sim::pe
