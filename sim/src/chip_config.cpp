// Chip presets: loading, overrides, validation and the effective-configuration JSON.
//
// A preset file holds one object per ChipConfig field:
//   "dram_bandwidth_GBps": {"value": 204.8, "unit": "GB/s", "source": "Hot Chips 2024 ..."}
// "value" is required; "unit", if present, must match the field's unit (so a preset written
// in the wrong unit is caught); "source" and "description" are free text.
#include "mtia/sim/chip_config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <variant>

#include <nlohmann/json.hpp>

#include "mtia/host/install_dirs.h"
#include "mtia/isa/address_map.h"
#include "mtia/isa/packets.h"
#include "mtia/isa/registers.h"
#include "mtia/settings/settings.h"

#ifndef MTIA_PRESET_DIR
#error "MTIA_PRESET_DIR must be defined by the build (sim/CMakeLists.txt)"
#endif

namespace mtia::sim {
namespace {

using Member =
    std::variant<std::string ChipConfig::*, uint32_t ChipConfig::*, uint64_t ChipConfig::*,
                 double ChipConfig::*, bool ChipConfig::*, uint32_t pe::UnitTiming::*>;

// The value a Member names in `config` (the unit fields live in ChipConfig::units).
template <typename T>
T& member_ref(ChipConfig& config, T ChipConfig::*member) {
  return config.*member;
}
template <typename T>
T& member_ref(ChipConfig& config, T pe::UnitTiming::*member) {
  return config.units.*member;
}
template <typename T>
const T& member_ref(const ChipConfig& config, T ChipConfig::*member) {
  return config.*member;
}
template <typename T>
const T& member_ref(const ChipConfig& config, T pe::UnitTiming::*member) {
  return config.units.*member;
}

struct Field {
  ConfigKey key;
  Member member;
  bool optional = false;  // a preset file may leave it out (fields added later: old files load)
};

// One row per ChipConfig field (ChipConfig::units' included), in the order of the struct.
// config_keys() and the preset loader are both driven by this table, so a field cannot be
// overridable but not loadable.
const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      {{"name", "", "preset name reported by the device (at most 16 characters are reported)"},
       &ChipConfig::name},
      {{"generation", "", "MTIA generation, 1 or 2"}, &ChipConfig::generation},
      {{"pe_rows", "", "rows of the processing-element grid, 1..8"}, &ChipConfig::pe_rows},
      {{"pe_cols", "", "columns of the processing-element grid, 1..8"}, &ChipConfig::pe_cols},
      {{"clock_hz", "Hz", "PE and firmware clock"}, &ChipConfig::clock_hz},
      {{"local_store_bytes", "bytes", "local store per PE, at most 1 MiB (its address window)"},
       &ChipConfig::local_store_bytes},
      {{"local_store_bandwidth_GBps", "GB/s",
        "a PE's local-store port (10^9 bytes/s): the most a DMA into or out of one PE's local "
        "store moves; private to the PE"},
       &ChipConfig::local_store_bandwidth_GBps},
      {{"dpe_int8_macs_per_cycle", "MAC/cycle", "DPE int8 multiply-accumulates per cycle per PE"},
       &pe::UnitTiming::dpe_int8_macs_per_cycle},
      {{"dpe_fp16_macs_per_cycle", "MAC/cycle",
        "DPE fp16 and bf16 multiply-accumulates per cycle per PE"},
       &pe::UnitTiming::dpe_fp16_macs_per_cycle},
      {{"dpe_fp32_macs_per_cycle", "MAC/cycle", "DPE fp32 multiply-accumulates per cycle per PE"},
       &pe::UnitTiming::dpe_fp32_macs_per_cycle},
      {{"dpe_issue_cycles", "cycles", "DPE fixed cost per matmul (decode, array fill and drain)"},
       &pe::UnitTiming::dpe_issue_cycles},
      {{"se_vector_bytes", "bytes", "SE vector width: bytes of elements processed per cycle"},
       &pe::UnitTiming::se_vector_bytes},
      {{"se_elements_per_cycle", "elements/cycle",
        "SE lanes: the most elements processed per cycle, whatever their width (optional)"},
       &pe::UnitTiming::se_elements_per_cycle,
       true},
      {{"se_simple_cycles", "cycles",
        "SE cycles per vector: arithmetic, compare, logic, select, clamp, cast"},
       &pe::UnitTiming::se_simple_cycles},
      {{"se_divide_cycles", "cycles", "SE cycles per vector: div, sqrt, rsqrt"},
       &pe::UnitTiming::se_divide_cycles},
      {{"se_transcendental_cycles", "cycles",
        "SE cycles per vector: exp, log, tanh, erf, sigmoid, silu"},
       &pe::UnitTiming::se_transcendental_cycles},
      {{"se_issue_cycles", "cycles", "SE fixed cost per operation"},
       &pe::UnitTiming::se_issue_cycles},
      {{"re_elements_per_cycle", "elements/cycle", "RE input elements consumed per cycle"},
       &pe::UnitTiming::re_elements_per_cycle},
      {{"re_issue_cycles", "cycles", "RE fixed cost per operation"},
       &pe::UnitTiming::re_issue_cycles},
      {{"mlu_bytes_per_cycle", "bytes/cycle", "MLU bytes moved per cycle (copy and transpose)"},
       &pe::UnitTiming::mlu_bytes_per_cycle},
      {{"mlu_issue_cycles", "cycles", "MLU fixed cost per operation"},
       &pe::UnitTiming::mlu_issue_cycles},
      {{"sram_bytes", "bytes", "on-chip SRAM shared by the PEs"}, &ChipConfig::sram_bytes},
      {{"sram_bandwidth_GBps", "GB/s",
        "on-chip SRAM bandwidth (10^9 bytes/s), shared by every DMA engine and every PE"},
       &ChipConfig::sram_bandwidth_GBps},
      {{"sram_latency_ns", "ns", "SRAM access latency added once per DMA job"},
       &ChipConfig::sram_latency_ns},
      {{"sram_burst_bytes", "bytes",
        "SRAM access granule; contiguous runs shorter than this still cost a whole burst"},
       &ChipConfig::sram_burst_bytes},
      {{"dram_bytes", "bytes", "LPDDR capacity, at most 128 GiB (backed lazily)"},
       &ChipConfig::dram_bytes},
      {{"dram_bandwidth_GBps", "GB/s",
        "LPDDR bandwidth (10^9 bytes/s), shared by every DMA engine"},
       &ChipConfig::dram_bandwidth_GBps},
      {{"dram_latency_ns", "ns", "LPDDR access latency added once per DMA job"},
       &ChipConfig::dram_latency_ns},
      {{"dram_burst_bytes", "bytes",
        "LPDDR access granule; contiguous runs shorter than this still cost a whole burst"},
       &ChipConfig::dram_burst_bytes},
      {{"pcie_h2d_bandwidth_GBps", "GB/s", "PCIe host-to-device bandwidth (10^9 bytes/s)"},
       &ChipConfig::pcie_h2d_bandwidth_GBps},
      {{"pcie_d2h_bandwidth_GBps", "GB/s", "PCIe device-to-host bandwidth (10^9 bytes/s)"},
       &ChipConfig::pcie_d2h_bandwidth_GBps},
      {{"pcie_latency_ns", "ns", "PCIe latency added once per DMA job that crosses the link"},
       &ChipConfig::pcie_latency_ns},
      {{"pcie_burst_bytes", "bytes",
        "PCIe payload granule; contiguous host runs shorter than this still cost a whole one"},
       &ChipConfig::pcie_burst_bytes},
      {{"link_count", "",
        "inter-chip links, 0..16: link transfers may name links 0..link_count-1 (optional)"},
       &ChipConfig::link_count,
       true},
      {{"link_bandwidth_GBps", "GB/s",
        "inter-chip link bandwidth per link and direction (10^9 bytes/s) (optional)"},
       &ChipConfig::link_bandwidth_GBps,
       true},
      {{"link_latency_ns", "ns", "inter-chip link latency added once per transfer (optional)"},
       &ChipConfig::link_latency_ns,
       true},
      {{"dma_engines", "", "DMA engines, 1..64"}, &ChipConfig::dma_engines},
      {{"dma_setup_ns", "ns", "descriptor fetch and start time per DMA job"},
       &ChipConfig::dma_setup_ns},
      {{"num_queues", "", "hardware command queues served by the firmware, 1..16"},
       &ChipConfig::num_queues},
      {{"cp_packet_ns", "ns", "firmware time to fetch, decode and dispatch one packet"},
       &ChipConfig::cp_packet_ns},
      {{"cp_replay_packet_ns", "ns",
        "firmware time to dispatch one packet of a command buffer (graph replay; optional)"},
       &ChipConfig::cp_replay_packet_ns,
       true},
      {{"pe_quantum_cycles", "cycles",
        "PE grid scheduler: cycles each PE core runs between SystemC waits (optional)"},
       &ChipConfig::pe_quantum_cycles,
       true},
      {{"pe_slice_cycles", "cycles",
        "PE grid scheduler: lockstep slice inside a quantum; the PEs' DMA requests reach the "
        "memory timelines at most this far out of time order (optional)"},
       &ChipConfig::pe_slice_cycles,
       true},
      {{"pe_watchdog_cycles", "cycles",
        "a launch's PE cycle limit when its packet gives none (optional)"},
       &ChipConfig::pe_watchdog_cycles,
       true},
      {{"kernel_image_max_bytes", "bytes",
        "largest kernel image (ELF file) a launch accepts (optional)"},
       &ChipConfig::kernel_image_max_bytes,
       true},
      {{"timing", "", "false: functional only, every duration is zero"}, &ChipConfig::timing},
  };
  return table;
}

std::string valid_keys_list() {
  std::string out;
  for (const auto& f : fields()) {
    if (!out.empty()) out += ", ";
    out += f.key.key;
  }
  return out;
}

const Field* find_field(const std::string& key) {
  for (const auto& f : fields()) {
    if (f.key.key == key) return &f;
  }
  return nullptr;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

template <typename T>
bool parse_unsigned(const std::string& text, T& out) {
  if (text.empty() || text[0] == '-' || text[0] == '+') return false;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    first += 2;
    base = 16;
  }
  auto [ptr, ec] = std::from_chars(first, last, out, base);
  return ec == std::errc() && ptr == last;
}

bool parse_double(const std::string& text, double& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(v)) return false;
  out = v;
  return true;
}

bool parse_bool(const std::string& text, bool& out) {
  if (text == "true" || text == "1" || text == "on" || text == "yes") {
    out = true;
    return true;
  }
  if (text == "false" || text == "0" || text == "off" || text == "no") {
    out = false;
    return true;
  }
  return false;
}

// Every problem with a preset or an override is the caller's bad argument.
isa::Failure bad_field(std::string why) {
  return isa::reject(isa::ErrorCode::kInvalidArgument, std::move(why));
}

// Sets a field from a JSON value; a failure names `where`.
isa::Status set_from_json(ChipConfig& config, const Field& field, const nlohmann::json& v,
                          const std::string& where) {
  return std::visit(
      [&](auto member) -> isa::Status {
        using T = std::remove_reference_t<decltype(member_ref(config, member))>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) return bad_field(where + ": expected a string");
          member_ref(config, member) = v.get<std::string>();
          return {};
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) return bad_field(where + ": expected true or false");
          member_ref(config, member) = v.get<bool>();
          return {};
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) return bad_field(where + ": expected a number");
          member_ref(config, member) = v.get<double>();
          return {};
        } else {
          if (!v.is_number_unsigned()) {
            return bad_field(where + ": expected an unsigned integer");
          }
          const uint64_t u = v.get<uint64_t>();
          if (u > std::numeric_limits<T>::max()) {
            return bad_field(where + ": " + std::to_string(u) + " is too large (max " +
                             std::to_string(std::numeric_limits<T>::max()) + ")");
          }
          member_ref(config, member) = static_cast<T>(u);
        }
        return {};
      },
      field.member);
}

nlohmann::ordered_json get_as_json(const ChipConfig& config, const Field& field) {
  return std::visit([&](auto member) { return nlohmann::ordered_json(member_ref(config, member)); },
                    field.member);
}

isa::Result<ChipConfig> load_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return bad_field("cannot open preset file " + path.string());
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return parse_preset(text, path.string());
}

}  // namespace

isa::Result<ChipConfig> parse_preset(const std::string& text, const std::string& origin) {
  const std::filesystem::path path(origin);
  nlohmann::json doc;
  try {  // nlohmann reports a parse error only by exception: it ends here
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return bad_field("preset file " + path.string() + " is not valid JSON: " + e.what());
  }
  if (!doc.is_object()) {
    return bad_field("preset file " + path.string() + ": top level must be an object of fields");
  }
  ChipConfig config;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string where = "preset file " + path.string() + ", field '" + it.key() + "'";
    const Field* field = find_field(it.key());
    if (field == nullptr) {
      return bad_field(where + ": unknown field; valid fields: " + valid_keys_list());
    }
    const auto& entry = it.value();
    if (!entry.is_object() || !entry.contains("value")) {
      return bad_field(where + ": expected {\"value\": ..., \"unit\": ..., \"source\": ...}");
    }
    for (auto e = entry.begin(); e != entry.end(); ++e) {
      if (e.key() != "value" && e.key() != "unit" && e.key() != "source" &&
          e.key() != "description") {
        return bad_field(where + ": unexpected member '" + e.key() +
                         "' (allowed: value, unit, source, description)");
      }
      if (e.key() != "value" && !e.value().is_string()) {
        return bad_field(where + ": '" + e.key() + "' must be a string");
      }
    }
    if (entry.contains("unit") && entry["unit"].get<std::string>() != field->key.unit) {
      return bad_field(where + ": unit is '" + entry["unit"].get<std::string>() +
                       "' but this field is in '" + field->key.unit + "'");
    }
    if (isa::Status set = set_from_json(config, *field, entry["value"], where); !set)
      return set.error();
  }
  for (const auto& f : fields()) {
    if (!f.optional && !doc.contains(f.key.key)) {
      return bad_field("preset file " + path.string() + " lacks field '" + f.key.key +
                       "' (every field must be given, with its source)");
    }
  }
  if (isa::Status valid = validate(config); !valid) {
    return isa::with_context(valid.error(), "preset file " + path.string() + ": ");
  }
  return config;
}

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

bool is_power_of_two(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// Why `text` cannot be a string field's value, or "" when it can: 1..kMaxTextBytes bytes of
// well-formed UTF-8 with no control characters (the value goes into JSON, traces and logs).
constexpr size_t kMaxTextBytes = 128;
std::string text_problem(const std::string& text) {
  if (text.empty()) return "is empty";
  if (text.size() > kMaxTextBytes) {
    return "is " + std::to_string(text.size()) + " bytes long; at most " +
           std::to_string(kMaxTextBytes) + " are allowed";
  }
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      len = 1, cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return "is not UTF-8 (byte " + std::to_string(i) + ")";
    }
    if (i + len > text.size()) return "is not UTF-8 (truncated at byte " + std::to_string(i) + ")";
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return "is not UTF-8 (byte " + std::to_string(i + k) + ")";
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
    static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return "is not UTF-8 (byte " + std::to_string(i) + ")";
    }
    if (cp < 0x20 || cp == 0x7F) return "has a control character (byte " + std::to_string(i) + ")";
    i += len;
  }
  return "";
}

}  // namespace

std::string preset_directory() {
  if (auto dir = settings::read("MTIA_EMU_PRESET_DIR")) return *dir;
  // An installed program reads its installation's presets, not those of the tree it was
  // built from (which may be gone).
  if (const std::string installed = host::installed_data_dir(); !installed.empty()) {
    return installed + "/presets";
  }
  return MTIA_PRESET_DIR;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(preset_directory(), ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") {
      names.push_back(entry.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

isa::Result<ChipConfig> load_preset(const std::string& name_or_path) {
  if (name_or_path.empty()) {
    return bad_field("empty preset name; available presets: " + join(preset_names()));
  }
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       std::filesystem::path(name_or_path).extension() == ".json";
  if (is_path) return load_file(name_or_path);
  const auto path = std::filesystem::path(preset_directory()) / (name_or_path + ".json");
  if (!std::filesystem::exists(path)) {
    return bad_field("unknown preset '" + name_or_path + "' (looked for " + path.string() +
                     "); available presets: " + join(preset_names()) +
                     " (set MTIA_EMU_PRESET_DIR to look elsewhere)");
  }
  return load_file(path);
}

isa::Status apply_override(ChipConfig& config, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos) {
    return bad_field("config override '" + assignment +
                     "' is not of the form key=value; valid keys: " + valid_keys_list());
  }
  const std::string key = trim(assignment.substr(0, eq));
  const std::string text = trim(assignment.substr(eq + 1));
  const Field* field = find_field(key);
  if (field == nullptr) {
    return bad_field("unknown config key '" + key + "'; valid keys: " + valid_keys_list());
  }
  const std::string unit = field->key.unit.empty() ? "" : " (" + field->key.unit + ")";
  return std::visit(
      [&](auto member) -> isa::Status {
        using T = std::remove_reference_t<decltype(member_ref(config, member))>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (text.empty()) return bad_field("config key '" + key + "' needs a value");
          if (const std::string why = text_problem(text); !why.empty()) {
            return bad_field("config key '" + key + "': the value " + why);
          }
          member_ref(config, member) = text;
          return {};
        } else if constexpr (std::is_same_v<T, bool>) {
          bool v = false;
          if (!parse_bool(text, v)) {
            return bad_field("config key '" + key + "' expects true or false, got '" + text + "'");
          }
          member_ref(config, member) = v;
          return {};
        } else if constexpr (std::is_same_v<T, double>) {
          double v = 0;
          if (!parse_double(text, v)) {
            return bad_field("config key '" + key + "' expects a number" + unit + ", got '" + text +
                             "'");
          }
          member_ref(config, member) = v;
          return {};
        } else {
          T v = 0;
          if (!parse_unsigned(text, v)) {
            return bad_field("config key '" + key + "' expects an unsigned integer" + unit +
                             " no larger than " + std::to_string(std::numeric_limits<T>::max()) +
                             ", got '" + text + "'");
          }
          member_ref(config, member) = v;
          return {};
        }
      },
      field->member);
}

isa::Status validate(const ChipConfig& c) {
  auto fail = [](const std::string& msg) { return bad_field("invalid config: " + msg); };
  if (const std::string why = text_problem(c.name); !why.empty()) return fail("name " + why);
  if (c.generation != 1 && c.generation != 2) {
    return fail("generation is " + std::to_string(c.generation) + "; must be 1 or 2");
  }
  if (c.pe_rows < 1 || c.pe_rows > 8) {
    return fail("pe_rows is " + std::to_string(c.pe_rows) + "; must be 1..8");
  }
  if (c.pe_cols < 1 || c.pe_cols > 8) {
    return fail("pe_cols is " + std::to_string(c.pe_cols) + "; must be 1..8");
  }
  if (c.clock_hz == 0) return fail("clock_hz is 0; must be positive");
  if (c.local_store_bytes == 0 || c.local_store_bytes > isa::kLocalStoreStride) {
    return fail("local_store_bytes is " + std::to_string(c.local_store_bytes) + "; must be 1.." +
                std::to_string(isa::kLocalStoreStride) + " (the per-PE address window)");
  }
  if (c.sram_bytes == 0 || c.sram_bytes > isa::kLocalStoreBase - isa::kSramBase) {
    return fail("sram_bytes is " + std::to_string(c.sram_bytes) + "; must be 1.." +
                std::to_string(isa::kLocalStoreBase - isa::kSramBase));
  }
  if (c.dram_bytes == 0 || c.dram_bytes > isa::kDramMaxBytes) {
    return fail("dram_bytes is " + std::to_string(c.dram_bytes) + "; must be 1.." +
                std::to_string(isa::kDramMaxBytes) + " (128 GiB)");
  }
  // Bandwidths are used at 1 MB/s resolution (see memory_system.h), so 0.001 GB/s is the floor.
  const std::pair<const char*, double> bandwidths[] = {
      {"local_store_bandwidth_GBps", c.local_store_bandwidth_GBps},
      {"sram_bandwidth_GBps", c.sram_bandwidth_GBps},
      {"dram_bandwidth_GBps", c.dram_bandwidth_GBps},
      {"pcie_h2d_bandwidth_GBps", c.pcie_h2d_bandwidth_GBps},
      {"pcie_d2h_bandwidth_GBps", c.pcie_d2h_bandwidth_GBps},
      {"link_bandwidth_GBps", c.link_bandwidth_GBps},
  };
  for (const auto& [key, v] : bandwidths) {
    if (!std::isfinite(v) || v < 0.001 || v > 1e6) {
      std::ostringstream msg;
      msg << key << " is " << v << "; must be a positive bandwidth of 0.001..1e6 GB/s";
      return fail(msg.str());
    }
  }
  const std::pair<const char*, double> durations[] = {
      {"sram_latency_ns", c.sram_latency_ns}, {"dram_latency_ns", c.dram_latency_ns},
      {"pcie_latency_ns", c.pcie_latency_ns}, {"dma_setup_ns", c.dma_setup_ns},
      {"cp_packet_ns", c.cp_packet_ns},       {"cp_replay_packet_ns", c.cp_replay_packet_ns},
      {"link_latency_ns", c.link_latency_ns},
  };
  for (const auto& [key, v] : durations) {
    if (!std::isfinite(v) || v < 0 || v > 1e9) {
      std::ostringstream msg;
      msg << key << " is " << v << "; must be 0..1e9 ns";
      return fail(msg.str());
    }
  }
  const std::pair<const char*, uint32_t> bursts[] = {
      {"sram_burst_bytes", c.sram_burst_bytes},
      {"dram_burst_bytes", c.dram_burst_bytes},
      {"pcie_burst_bytes", c.pcie_burst_bytes},
  };
  for (const auto& [key, v] : bursts) {
    if (!is_power_of_two(v) || v > 65536) {
      return fail(std::string(key) + " is " + std::to_string(v) +
                  "; must be a power of two from 1 to 65536");
    }
  }
  // Unit rates divide work; fixed costs may be 0.
  const std::pair<const char*, uint32_t> rates[] = {
      {"dpe_int8_macs_per_cycle", c.units.dpe_int8_macs_per_cycle},
      {"dpe_fp16_macs_per_cycle", c.units.dpe_fp16_macs_per_cycle},
      {"dpe_fp32_macs_per_cycle", c.units.dpe_fp32_macs_per_cycle},
      {"se_vector_bytes", c.units.se_vector_bytes},
      {"se_elements_per_cycle", c.units.se_elements_per_cycle},
      {"se_simple_cycles", c.units.se_simple_cycles},
      {"se_divide_cycles", c.units.se_divide_cycles},
      {"se_transcendental_cycles", c.units.se_transcendental_cycles},
      {"re_elements_per_cycle", c.units.re_elements_per_cycle},
      {"mlu_bytes_per_cycle", c.units.mlu_bytes_per_cycle},
  };
  for (const auto& [key, v] : rates) {
    if (v < 1 || v > (1u << 20)) {
      return fail(std::string(key) + " is " + std::to_string(v) + "; must be 1.." +
                  std::to_string(1u << 20));
    }
  }
  if (c.pe_quantum_cycles < 1 || c.pe_quantum_cycles > (uint64_t{1} << 32)) {
    return fail("pe_quantum_cycles is " + std::to_string(c.pe_quantum_cycles) + "; must be 1.." +
                std::to_string(uint64_t{1} << 32));
  }
  if (c.pe_slice_cycles < 1 || c.pe_slice_cycles > c.pe_quantum_cycles) {
    return fail("pe_slice_cycles is " + std::to_string(c.pe_slice_cycles) +
                "; must be 1..pe_quantum_cycles (" + std::to_string(c.pe_quantum_cycles) + ")");
  }
  if (c.pe_watchdog_cycles < 1) return fail("pe_watchdog_cycles is 0; must be at least 1");
  if (c.kernel_image_max_bytes < 64 || c.kernel_image_max_bytes > (uint64_t{1} << 30)) {
    return fail("kernel_image_max_bytes is " + std::to_string(c.kernel_image_max_bytes) +
                "; must be 64.." + std::to_string(uint64_t{1} << 30) + " (an ELF header to 1 GiB)");
  }
  if (c.dma_engines < 1 || c.dma_engines > 64) {
    return fail("dma_engines is " + std::to_string(c.dma_engines) + "; must be 1..64");
  }
  if (c.link_count > isa::kMaxLinks) {
    return fail("link_count is " + std::to_string(c.link_count) + "; must be 0.." +
                std::to_string(isa::kMaxLinks));
  }
  if (c.num_queues < 1 || c.num_queues > isa::kMaxQueues) {
    return fail("num_queues is " + std::to_string(c.num_queues) + "; must be 1.." +
                std::to_string(isa::kMaxQueues));
  }
  return {};
}

std::string to_json(const ChipConfig& config) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  for (const auto& f : fields()) {
    nlohmann::ordered_json entry;
    entry["value"] = get_as_json(config, f);
    entry["unit"] = f.key.unit;
    entry["description"] = f.key.description;
    doc[f.key.key] = entry;
  }
  return doc.dump(2) + "\n";
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> out;
    for (const auto& f : fields()) out.push_back(f.key);
    return out;
  }();
  return keys;
}

}  // namespace mtia::sim
