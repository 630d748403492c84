#include "json_out.h"

#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace mtia::trace::detail {

void JsonOut::element() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (levels_.empty()) return;
  Level& l = levels_.back();
  if (!l.first) append(l.separator);
  l.first = false;
}

JsonOut& JsonOut::begin_object(std::string_view separator) {
  element();
  append("{");
  levels_.push_back({std::string(separator), true});
  return *this;
}

JsonOut& JsonOut::end_object() {
  levels_.pop_back();
  append("}");
  return *this;
}

JsonOut& JsonOut::begin_array(std::string_view separator) {
  element();
  append("[");
  levels_.push_back({std::string(separator), true});
  return *this;
}

JsonOut& JsonOut::end_array() {
  levels_.pop_back();
  append("]");
  return *this;
}

JsonOut& JsonOut::key(std::string_view name) {
  element();
  append_string(name);
  append(":");
  after_key_ = true;
  return *this;
}

JsonOut& JsonOut::str(std::string_view text) {
  element();
  append_string(text);
  return *this;
}

void JsonOut::append_string(std::string_view text) {
  // nlohmann's escaping; bytes that are not UTF-8 become U+FFFD instead of failing the trace.
  append(nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

JsonOut& JsonOut::u64(uint64_t value) {
  element();
  append(std::to_string(value));
  return *this;
}

JsonOut& JsonOut::i64(int64_t value) {
  element();
  append(std::to_string(value));
  return *this;
}

JsonOut& JsonOut::boolean(bool value) {
  element();
  append(value ? "true" : "false");
  return *this;
}

JsonOut& JsonOut::dbl(double value) {
  element();
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", value);
  append(buf);
  return *this;
}

JsonOut& JsonOut::us(uint64_t ps) {
  element();
  char buf[48];
  std::snprintf(buf, sizeof buf, "%" PRIu64 ".%06" PRIu64, ps / 1'000'000, ps % 1'000'000);
  append(buf);
  return *this;
}

JsonOut& JsonOut::hex(uint64_t value) {
  element();
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"0x%" PRIx64 "\"", value);
  append(buf);
  return *this;
}

JsonOut& JsonOut::json(std::string_view text) {
  element();
  append(text);
  return *this;
}

JsonOut& JsonOut::raw(std::string_view text) {
  append(text);
  return *this;
}

void JsonOut::flush() {
  out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
  buf_.clear();
}

}  // namespace mtia::trace::detail
