// A small streaming JSON writer: values go into a buffer that is handed to the stream in large
// pieces, so a trace of a million events is never built as one string. Commas are placed by
// the writer; numbers are written exactly as the trace format wants them (simulated
// picoseconds as microseconds with 6 decimals, doubles with 9 significant digits).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace mtia::trace::detail {

class JsonOut {
 public:
  explicit JsonOut(std::ostream& out) : out_(out) { buf_.reserve(kFlushBytes + 4096); }
  ~JsonOut() { flush(); }
  JsonOut(const JsonOut&) = delete;
  JsonOut& operator=(const JsonOut&) = delete;

  // Containers. `separator` goes between elements (",\n" puts each on its own line).
  JsonOut& begin_object(std::string_view separator = ",");
  JsonOut& end_object();
  JsonOut& begin_array(std::string_view separator = ",");
  JsonOut& end_array();

  JsonOut& key(std::string_view name);  // the next value is this member's
  JsonOut& str(std::string_view text);  // escaped
  JsonOut& u64(uint64_t value);
  JsonOut& i64(int64_t value);
  JsonOut& boolean(bool value);
  JsonOut& dbl(double value);            // %.9g
  JsonOut& us(uint64_t ps);              // microseconds, exactly: "12.000345"
  JsonOut& hex(uint64_t value);          // "0x1f" as a string
  JsonOut& json(std::string_view text);  // a value that is already JSON text
  JsonOut& raw(std::string_view text);   // text outside any value (a final newline)

  // key(name) followed by the value.
  template <class T>
  JsonOut& field(std::string_view name, const T& value);

  void flush();

 private:
  static constexpr size_t kFlushBytes = 1 << 20;
  struct Level {
    std::string separator;
    bool first = true;
  };
  void element();  // before a value or key: the separator unless first or after a key
  void append_string(std::string_view text);  // quoted and escaped
  void append(std::string_view s) {
    buf_.append(s);
    if (buf_.size() >= kFlushBytes) flush();
  }

  std::ostream& out_;
  std::string buf_;
  std::vector<Level> levels_;
  bool after_key_ = false;
};

template <class T>
JsonOut& JsonOut::field(std::string_view name, const T& value) {
  key(name);
  if constexpr (std::is_same_v<T, bool>) {
    return boolean(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    return dbl(value);
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return i64(value);
  } else if constexpr (std::is_integral_v<T>) {
    return u64(value);
  } else {
    return str(value);
  }
}

}  // namespace mtia::trace::detail
