#include "run_args.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string_view>

#include "mlp.h"
#include "mtia/isa/pe/pe_ops.h"

namespace mtia::tools {
namespace {

constexpr const char* kSyntax =
    "arguments are i64:VALUE, f32:VALUE, f64:VALUE, dtype:NAME, in:TYPE:FILE, "
    "in:TYPE:range(START,STOP[,STEP]), in:TYPE:fill(COUNT,VALUE) or out:TYPE:COUNT:FILE "
    "(`mtia-emu run --help`)";

const std::array<ElementType, 7> kTypes = {{
    {MTIA_PE_DT_FP32, "fp32", 4, true},
    {MTIA_PE_DT_FP16, "fp16", 2, true},
    {MTIA_PE_DT_BF16, "bf16", 2, true},
    {MTIA_PE_DT_INT8, "int8", 1, false},
    {MTIA_PE_DT_INT32, "int32", 4, false},
    {MTIA_PE_DT_INT64, "int64", 8, false},
    {MTIA_PE_DT_BOOL, "bool", 1, false},
}};

[[noreturn]] void fail(const std::string& text, const std::string& what) {
  throw std::invalid_argument("argument '" + text + "': " + what);
}

// A whole-string integer (decimal, or hexadecimal after 0x), or nothing.
bool parse_int(std::string_view s, int64_t& out) {
  bool negative = !s.empty() && s[0] == '-';
  std::string_view digits = negative ? s.substr(1) : s;
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    digits.remove_prefix(2);
    base = 16;
  }
  uint64_t magnitude = 0;
  const auto [end, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) return false;
  const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  if (magnitude > limit) return false;
  out = negative ? static_cast<int64_t>(~magnitude + 1) : static_cast<int64_t>(magnitude);
  return true;
}

bool parse_double(std::string_view s, double& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// Appends `value` as one element of `type`; false when the type cannot hold it exactly
// (integers: out of range or not whole; floats are rounded to nearest even, as device casts).
bool append_element(const ElementType& type, double value, std::vector<uint8_t>& bytes) {
  const size_t at = bytes.size();
  bytes.resize(at + type.bytes);
  uint8_t* p = bytes.data() + at;
  switch (type.code) {
    case MTIA_PE_DT_FP32: {
      const float f = static_cast<float>(value);
      std::memcpy(p, &f, 4);
      return true;
    }
    case MTIA_PE_DT_FP16: {
      const uint16_t h = float_to_fp16(static_cast<float>(value));
      std::memcpy(p, &h, 2);
      return true;
    }
    case MTIA_PE_DT_BF16: {
      const uint16_t h = float_to_bf16(static_cast<float>(value));
      std::memcpy(p, &h, 2);
      return true;
    }
    default:
      break;
  }
  if (std::trunc(value) != value) return false;
  const auto fits = [&](double lo, double hi) { return value >= lo && value <= hi; };
  if (type.code == MTIA_PE_DT_INT8 && fits(-128, 127)) {
    *p = static_cast<uint8_t>(static_cast<int8_t>(value));
  } else if (type.code == MTIA_PE_DT_BOOL && fits(0, 1)) {
    *p = static_cast<uint8_t>(value);
  } else if (type.code == MTIA_PE_DT_INT32 && fits(-2147483648.0, 2147483647.0)) {
    const int32_t v = static_cast<int32_t>(value);
    std::memcpy(p, &v, 4);
  } else if (type.code == MTIA_PE_DT_INT64 && fits(-0x1p63, 0x1p63) && value < 0x1p63) {
    const int64_t v = static_cast<int64_t>(value);
    std::memcpy(p, &v, 8);
  } else {
    return false;
  }
  return true;
}

// "range(0,10,2)" with name "range" -> {"0", "10", "2"}; nothing when `s` is not name(...).
bool split_call(std::string_view s, std::string_view name, std::vector<std::string>& parts) {
  if (s.size() < name.size() + 2 || s.substr(0, name.size()) != name || s[name.size()] != '(' ||
      s.back() != ')') {
    return false;
  }
  std::string_view inner = s.substr(name.size() + 1, s.size() - name.size() - 2);
  parts.clear();
  for (size_t comma; (comma = inner.find(',')) != std::string_view::npos;) {
    parts.emplace_back(inner.substr(0, comma));
    inner.remove_prefix(comma + 1);
  }
  parts.emplace_back(inner);
  return true;
}

double number(const std::string& text, const std::string& s, const char* what) {
  double v = 0;
  int64_t i = 0;
  if (parse_int(s, i)) return static_cast<double>(i);
  if (!parse_double(s, v)) fail(text, std::string(what) + " '" + s + "' is not a number");
  return v;
}

void input_from_range(RunArg& a, const std::vector<std::string>& parts) {
  if (parts.size() != 2 && parts.size() != 3) {
    fail(a.text, "range takes START,STOP or START,STOP,STEP");
  }
  const double start = number(a.text, parts[0], "START");
  const double stop = number(a.text, parts[1], "STOP");
  const double step = parts.size() == 3 ? number(a.text, parts[2], "STEP") : 1.0;
  if (step == 0 || !std::isfinite(step)) fail(a.text, "STEP must be a non-zero number");
  const double n = std::ceil((stop - start) / step);
  if (!(n >= 1)) fail(a.text, "the range is empty; a buffer needs at least one element");
  if (n > static_cast<double>(1ull << 32)) fail(a.text, "the range has more than 2^32 elements");
  a.count = static_cast<uint64_t>(n);
  for (uint64_t i = 0; i < a.count; ++i) {
    const double v = start + static_cast<double>(i) * step;
    if (!append_element(a.type, v, a.bytes)) {
      fail(a.text, "value " + std::to_string(v) + " does not fit " + a.type.name);
    }
  }
}

void input_from_fill(RunArg& a, const std::vector<std::string>& parts) {
  int64_t count = 0;
  if (parts.size() != 2 || !parse_int(parts[0], count) || count < 1 || count > (1ll << 32)) {
    fail(a.text, "fill takes COUNT,VALUE with COUNT a whole number from 1 to 2^32");
  }
  const double value = number(a.text, parts[1], "VALUE");
  if (!append_element(a.type, value, a.bytes))
    fail(a.text, parts[1] + " does not fit " + a.type.name);
  a.count = static_cast<uint64_t>(count);
  const std::vector<uint8_t> one = a.bytes;
  a.bytes.clear();
  a.bytes.reserve(a.count * one.size());
  for (uint64_t i = 0; i < a.count; ++i) a.bytes.insert(a.bytes.end(), one.begin(), one.end());
}

void input_from_file(RunArg& a, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    fail(a.text, "input file '" + path + "' does not exist or is not a file");
  }
  std::ifstream in(path, std::ios::binary);
  a.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) fail(a.text, "cannot read '" + path + "'");
  if (a.bytes.empty()) fail(a.text, "input file '" + path + "' is empty");
  if (a.bytes.size() % a.type.bytes != 0) {
    fail(a.text, "input file '" + path + "' has " + std::to_string(a.bytes.size()) +
                     " bytes, not a whole number of " + a.type.name + " elements (" +
                     std::to_string(a.type.bytes) + " bytes each)");
  }
  a.count = a.bytes.size() / a.type.bytes;
}

}  // namespace

ElementType element_type(const std::string& name) {
  for (const ElementType& t : kTypes) {
    if (t.name == name) return t;
  }
  throw std::invalid_argument("unknown element type '" + name +
                              "'; the types are fp32, fp16, bf16, int8, int32, int64 and bool");
}

ArgKind RunArg::kind() const {
  return form == Form::kScalar ? scalar.kind() : ArgKind::kPointer;
}

std::string RunArg::describe() const {
  switch (form) {
    case Form::kScalar:
      return std::string(arg_kind_name(scalar.kind())) + " scalar";
    case Form::kInput:
      return type.name + " input buffer of " + std::to_string(count) + " elements";
    case Form::kOutput:
      return type.name + " output buffer of " + std::to_string(count) + " elements";
  }
  return "";
}

RunArg parse_run_arg(const std::string& text) {
  RunArg a;
  a.text = text;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) fail(text, std::string("no KIND: prefix; ") + kSyntax);
  const std::string kind = text.substr(0, colon);
  const std::string rest = text.substr(colon + 1);
  if (kind == "i64") {
    int64_t v = 0;
    if (!parse_int(rest, v)) fail(text, "'" + rest + "' is not a 64-bit integer");
    a.scalar = Arg(v);
  } else if (kind == "f32" || kind == "f64") {
    double v = 0;
    if (!parse_double(rest, v)) fail(text, "'" + rest + "' is not a number");
    a.scalar = kind == "f32" ? Arg(static_cast<float>(v)) : Arg(v);
  } else if (kind == "dtype") {
    try {
      a.scalar = Arg::dtype(element_type(rest).code);
    } catch (const std::invalid_argument& e) {
      fail(text, e.what());
    }
  } else if (kind == "in" || kind == "out") {
    const size_t colon2 = rest.find(':');
    if (colon2 == std::string::npos) {
      fail(text, kind == "in" ? "write in:TYPE:FILE, in:TYPE:range(...) or in:TYPE:fill(...)"
                              : "write out:TYPE:COUNT:FILE");
    }
    try {
      a.type = element_type(rest.substr(0, colon2));
    } catch (const std::invalid_argument& e) {
      fail(text, e.what());
    }
    const std::string source = rest.substr(colon2 + 1);
    std::vector<std::string> parts;
    if (kind == "out") {
      a.form = RunArg::Form::kOutput;
      const size_t colon3 = source.find(':');
      int64_t count = 0;
      if (colon3 == std::string::npos || !parse_int(source.substr(0, colon3), count) || count < 1 ||
          count > (1ll << 32)) {
        fail(text, "write out:TYPE:COUNT:FILE, COUNT a whole number from 1 to 2^32");
      }
      a.count = static_cast<uint64_t>(count);
      a.path = source.substr(colon3 + 1);
      if (a.path.empty()) fail(text, "no FILE to write the output to");
    } else {
      a.form = RunArg::Form::kInput;
      if (split_call(source, "range", parts)) {
        input_from_range(a, parts);
      } else if (split_call(source, "fill", parts)) {
        input_from_fill(a, parts);
      } else {
        input_from_file(a, source);
      }
    }
  } else {
    fail(text, "unknown kind '" + kind + "'; " + kSyntax);
  }
  return a;
}

void check_run_args(const Kernel& kernel, const std::vector<RunArg>& args) {
  if (!kernel.checked) {
    throw std::invalid_argument("kernel '" + kernel.name +
                                "' has no signature (the module has no kernel metadata)");
  }
  if (args.size() != kernel.params.size()) {
    throw std::invalid_argument(kernel.describe() + " takes " +
                                std::to_string(kernel.params.size()) + " arguments; " +
                                std::to_string(args.size()) + " given");
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelParam& p = kernel.params[i];
    if (args[i].kind() == p.kind) continue;
    const std::string hint = p.kind == ArgKind::kPointer
                                 ? "pass a buffer: in:TYPE:... or out:TYPE:COUNT:FILE"
                                 : "pass " + std::string(arg_kind_name(p.kind)) + ":VALUE";
    throw std::invalid_argument("argument " + std::to_string(i + 1) + " of " + kernel.describe() +
                                ", " + p.name + ", is " + arg_kind_name(p.kind) + " but '" +
                                args[i].text + "' is a " + args[i].describe() + "; " + hint);
  }
}

}  // namespace mtia::tools
