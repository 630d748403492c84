// Presets carry the published numbers with their sources; overrides and validation reject bad
// input with messages that name the problem.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "mtia/sim/chip_config.h"
#include "must.h"

using mtia::test::must;

using mtia::sim::apply_override;
using mtia::sim::ChipConfig;
using mtia::sim::config_keys;
using mtia::sim::load_preset;
using mtia::sim::to_json;
using mtia::sim::validate;

namespace {

std::filesystem::path temp_dir(const std::string& leaf) {
  auto dir = std::filesystem::temp_directory_path() /
             ("mtia_sim_test_" + std::to_string(::getpid()) + "_" + leaf);
  std::filesystem::create_directories(dir);
  return dir;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// Expects `fn` to fail as the caller's bad argument, with a reason that contains every one of
// `parts`.
template <typename Fn>
void require_fails_with(Fn&& fn, std::initializer_list<std::string> parts) {
  const mtia::isa::Failure f = mtia::test::failure(fn());
  CHECK(f.code == mtia::isa::ErrorCode::kInvalidArgument);
  for (const auto& part : parts) {
    INFO("message: " << f.reason);
    CHECK(f.reason.find(part) != std::string::npos);
  }
}

nlohmann::json preset_doc(const std::string& name) {
  std::ifstream in(std::filesystem::path(MTIA_PRESET_DIR) / (name + ".json"));
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

// The published figures each preset field is checked against: ISCA'25 (Coburn et al., "Meta's
// Second Generation AI Chip", Table 2 and sections 3-4), with its MTIA 1 column for mtia-v1.
// Rates are chip totals; a preset's per-PE, per-cycle figure times 64 PEs and the clock must
// give them back.
struct Published {
  double clock_hz;
  uint64_t local_store_bytes;
  double local_store_Bps;  // per PE
  double gemm_int8_ops;    // dense
  double gemm_fp16_flops;  // dense, FP16/BF16
  double se_ops[3];        // SIMD Engine by element bytes 1, 2, 4 (INT8, FP16/BF16, FP32); 0: none
  uint64_t sram_bytes;
  double sram_Bps;
  uint64_t dram_bytes_max;  // the upper end of the published capacity range
  double dram_Bps;
  double pcie_Bps;  // listed per direction, before 128b/130b line coding
};

constexpr double kTera = 1e12;
constexpr Published kMtia2i = {1.35e9,       384 * 1024,  1.0 * kTera,
                               354 * kTera,  177 * kTera, {5.5 * kTera, 5.5 * kTera, 5.5 * kTera},
                               256ull << 20, 2.7 * kTera, 128ull << 30,
                               204.8e9,      32e9};
constexpr Published kMtia1 = {0.8e9,         128 * 1024,   0.4 * kTera,
                              102.4 * kTera, 51.2 * kTera, {3.2 * kTera, 1.6 * kTera, 0},
                              128ull << 20,  0.8 * kTera,  64ull << 30,
                              176e9,         16e9};

// SE lanes for elements of `bytes` bytes (the formula of unit_timing.h).
double se_lanes(const ChipConfig& c, unsigned bytes) {
  return std::min<double>(c.units.se_elements_per_cycle, c.units.se_vector_bytes / bytes);
}

// The preset's fields against the paper: exact where the paper gives the field itself, and
// within `rate_tol` where the paper gives a chip total the field is derived from (MTIA 1's
// column rounds: 102.4 TOPS is 1000 int8 MACs per cycle per PE, the preset's array 1024).
void check_against_paper(const ChipConfig& c, const Published& p, double rate_tol) {
  const double pe_hz = c.pe_rows * c.pe_cols * static_cast<double>(c.clock_hz);
  CHECK(c.pe_rows == 8);
  CHECK(c.pe_cols == 8);
  CHECK(c.clock_hz == p.clock_hz);
  CHECK(c.local_store_bytes == p.local_store_bytes);
  CHECK(c.local_store_bandwidth_GBps * 1e9 == Approx(p.local_store_Bps).epsilon(1e-12));
  CHECK(2 * c.units.dpe_int8_macs_per_cycle * pe_hz == Approx(p.gemm_int8_ops).epsilon(rate_tol));
  CHECK(2 * c.units.dpe_fp16_macs_per_cycle * pe_hz == Approx(p.gemm_fp16_flops).epsilon(rate_tol));
  const unsigned bytes[3] = {1, 2, 4};
  for (int i = 0; i < 3; ++i) {
    if (p.se_ops[i] == 0) continue;
    INFO("SE elements of " << bytes[i] << " bytes");
    // One operation per element per cycle at se_simple_cycles = 1.
    CHECK(c.units.se_simple_cycles == 1);
    CHECK(se_lanes(c, bytes[i]) * pe_hz == Approx(p.se_ops[i]).epsilon(rate_tol));
  }
  CHECK(c.sram_bytes == p.sram_bytes);
  CHECK(c.sram_bandwidth_GBps * 1e9 == Approx(p.sram_Bps).epsilon(1e-12));
  CHECK(c.dram_bytes == p.dram_bytes_max);
  CHECK(c.dram_bandwidth_GBps * 1e9 == Approx(p.dram_Bps).epsilon(1e-12));
  // The paper's PCIe figure is the raw rate of the x8 link; the preset takes off the line coding.
  CHECK(c.pcie_h2d_bandwidth_GBps * 1e9 == Approx(p.pcie_Bps * 128 / 130).epsilon(0.001));
  CHECK(c.pcie_d2h_bandwidth_GBps * 1e9 == Approx(p.pcie_Bps * 128 / 130).epsilon(0.001));
}

}  // namespace

TEST_CASE("mtia-v1 preset carries the published v1 numbers", "[config]") {
  const ChipConfig c = must(load_preset("mtia-v1"));
  CHECK(c.name == "mtia-v1");
  CHECK(c.generation == 1);
  check_against_paper(c, kMtia1, 0.025);
  CHECK(c.timing);
}

TEST_CASE("mtia-v2 preset carries the published v2 numbers", "[config]") {
  const ChipConfig c = must(load_preset("mtia-v2"));
  CHECK(c.name == "mtia-v2");
  CHECK(c.generation == 2);
  check_against_paper(c, kMtia2i, 0.006);
  // The DPE: two 32 x 32B x 32 MAC tiles giving 2.76 TFLOPS per PE in FP16/BF16 (section 3.2).
  CHECK(2 * c.units.dpe_fp16_macs_per_cycle * static_cast<double>(c.clock_hz) ==
        Approx(2.76e12).epsilon(0.002));
  // The SE is 2x the RISC-V vector core's FP16 rate (2.8) and 4x its FP32 rate (1.4).
  const double pe_hz = 64 * static_cast<double>(c.clock_hz);
  CHECK(se_lanes(c, 2) * pe_hz == Approx(2 * 2.8e12).epsilon(0.02));
  CHECK(se_lanes(c, 4) * pe_hz == Approx(4 * 1.4e12).epsilon(0.02));
  CHECK(c.num_queues >= 8);
}

TEST_CASE("every preset field has a value, the field's unit and a source", "[config]") {
  // Fields ISCA'25 publishes cite it (and never call themselves assumptions or unpublished);
  // the rest say they are assumptions.
  const std::set<std::string> assumed = {
      "sram_latency_ns",     "sram_burst_bytes",      "dram_latency_ns",
      "dram_burst_bytes",    "pcie_latency_ns",       "pcie_burst_bytes",
      "dma_engines",         "dma_setup_ns",          "num_queues",
      "cp_packet_ns",        "cp_replay_packet_ns",   "dpe_fp32_macs_per_cycle",
      "dpe_issue_cycles",    "se_divide_cycles",      "se_transcendental_cycles",
      "se_issue_cycles",     "re_elements_per_cycle", "re_issue_cycles",
      "mlu_bytes_per_cycle", "mlu_issue_cycles",      "link_count",
      "link_bandwidth_GBps", "link_latency_ns"};
  const std::set<std::string> published = {"generation",
                                           "pe_rows",
                                           "pe_cols",
                                           "clock_hz",
                                           "local_store_bytes",
                                           "local_store_bandwidth_GBps",
                                           "se_vector_bytes",
                                           "se_elements_per_cycle",
                                           "se_simple_cycles",
                                           "sram_bytes",
                                           "sram_bandwidth_GBps",
                                           "dram_bytes",
                                           "dram_bandwidth_GBps",
                                           "pcie_h2d_bandwidth_GBps",
                                           "pcie_d2h_bandwidth_GBps",
                                           "dpe_int8_macs_per_cycle",
                                           "dpe_fp16_macs_per_cycle"};
  for (const std::string name : {"mtia-v1", "mtia-v2"}) {
    const auto doc = preset_doc(name);
    for (const auto& key : config_keys()) {
      INFO(name << " field " << key.key);
      REQUIRE(doc.contains(key.key));
      const auto& field = doc[key.key];
      CHECK(field.contains("value"));
      CHECK(field["unit"].get<std::string>() == key.unit);
      const std::string source = field["source"].get<std::string>();
      CHECK(!source.empty());
      if (key.key == "name" || key.key == "timing") continue;
      const bool is_assumption = source.rfind("assumption:", 0) == 0;
      const bool cites = source.find("blog") != std::string::npos ||
                         source.find("Hot Chips") != std::string::npos ||
                         source.find("ISCA") != std::string::npos;
      if (assumed.count(key.key)) CHECK(is_assumption);
      if (published.count(key.key)) {
        CHECK(!is_assumption);
        CHECK(source.find("assumption") == std::string::npos);
        CHECK(source.find("not published") == std::string::npos);
        CHECK(source.find("ISCA'25") != std::string::npos);
      }
      // Every other field is one or the other, never an unsourced number.
      CHECK((is_assumption || cites));
    }
  }
  // Where the paper and the blog or Hot Chips differ, the source says what the other said.
  CHECK(preset_doc("mtia-v2")["se_vector_bytes"]["source"].get<std::string>().find(
            "11.06 / 5.53 / 2.76") != std::string::npos);
  CHECK(preset_doc("mtia-v2")["sram_bandwidth_GBps"]["source"].get<std::string>().find(
            "blog said 3.5x") != std::string::npos);
}

TEST_CASE("presets are found by name, by path and through MTIA_EMU_PRESET_DIR", "[config]") {
  const auto names = mtia::sim::preset_names();
  CHECK(std::find(names.begin(), names.end(), "mtia-v1") != names.end());
  CHECK(std::find(names.begin(), names.end(), "mtia-v2") != names.end());
  CHECK(mtia::sim::preset_directory() == MTIA_PRESET_DIR);

  const auto path = std::filesystem::path(MTIA_PRESET_DIR) / "mtia-v2.json";
  CHECK(must(load_preset(path.string())).name == "mtia-v2");

  const auto dir = temp_dir("presetdir");
  std::filesystem::copy_file(path, dir / "custom.json",
                             std::filesystem::copy_options::overwrite_existing);
  setenv("MTIA_EMU_PRESET_DIR", dir.c_str(), 1);
  CHECK(mtia::sim::preset_directory() == dir.string());
  CHECK(mtia::sim::preset_names() == std::vector<std::string>{"custom"});
  CHECK(must(load_preset("custom")).dram_bytes == 128ull << 30);
  unsetenv("MTIA_EMU_PRESET_DIR");
  std::filesystem::remove_all(dir);

  require_fails_with([] { return load_preset("mtia-v9"); },
                     {"unknown preset 'mtia-v9'", "mtia-v1", "mtia-v2"});
  require_fails_with([] { return load_preset("/nonexistent/x.json"); },
                     {"cannot open", "/nonexistent/x.json"});
}

TEST_CASE("preset files with mistakes are rejected with the file and field named", "[config]") {
  const auto dir = temp_dir("badpresets");
  auto doc = preset_doc("mtia-v2");
  auto write_variant = [&](const std::string& leaf, const nlohmann::json& d) {
    const auto p = dir / leaf;
    write_text(p, d.dump());
    return p.string();
  };
  {
    const auto p = dir / "syntax.json";
    write_text(p, "{ not json");
    require_fails_with([&] { return load_preset(p.string()); }, {"syntax.json", "not valid JSON"});
  }
  {
    auto d = doc;
    d["warp_drive"] = {{"value", 1}};
    const auto p = write_variant("unknown.json", d);
    require_fails_with([&] { return load_preset(p); },
                       {"unknown.json", "'warp_drive'", "dram_bytes"});
  }
  {
    auto d = doc;
    d["dram_bandwidth_GBps"]["unit"] = "MB/s";
    const auto p = write_variant("unit.json", d);
    require_fails_with([&] { return load_preset(p); }, {"dram_bandwidth_GBps", "MB/s", "GB/s"});
  }
  {
    auto d = doc;
    d.erase("dma_engines");
    const auto p = write_variant("missing.json", d);
    require_fails_with([&] { return load_preset(p); }, {"lacks field 'dma_engines'"});
  }
  {
    auto d = doc;
    d["pe_rows"]["value"] = "eight";
    const auto p = write_variant("type.json", d);
    require_fails_with([&] { return load_preset(p); }, {"'pe_rows'", "unsigned integer"});
  }
  {
    auto d = doc;
    d["pe_rows"]["value"] = 9;
    const auto p = write_variant("invalid.json", d);
    require_fails_with([&] { return load_preset(p); }, {"invalid.json", "pe_rows"});
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("overrides set fields of every type", "[config]") {
  ChipConfig c = must(load_preset("mtia-v2"));
  must(apply_override(c, "dram_bandwidth_GBps=100.5"));
  must(apply_override(c, "dma_engines = 2"));
  must(apply_override(c, "dram_bytes=0x40000000"));
  must(apply_override(c, "timing=false"));
  must(apply_override(c, "name=my-chip"));
  CHECK(c.dram_bandwidth_GBps == 100.5);
  CHECK(c.dma_engines == 2);
  CHECK(c.dram_bytes == 1ull << 30);
  CHECK_FALSE(c.timing);
  CHECK(c.name == "my-chip");
  must(validate(c));
}

TEST_CASE("bad overrides are rejected with the key, the value and the valid keys", "[config]") {
  ChipConfig c = must(load_preset("mtia-v2"));
  require_fails_with([&] { return apply_override(c, "dram_bytes"); },
                     {"key=value", "dram_bytes", "pcie_latency_ns"});
  require_fails_with(
      [&] { return apply_override(c, "dram_size=5"); },
      {"unknown config key 'dram_size'", "valid keys", "dram_bytes", "cp_packet_ns"});
  require_fails_with([&] { return apply_override(c, "dram_bytes=lots"); },
                     {"'dram_bytes'", "unsigned integer", "'lots'"});
  require_fails_with([&] { return apply_override(c, "dma_engines=-1"); },
                     {"'dma_engines'", "'-1'"});
  require_fails_with([&] { return apply_override(c, "pe_rows=4294967296"); },
                     {"'pe_rows'", "4294967295"});
  require_fails_with([&] { return apply_override(c, "dram_bandwidth_GBps=fast"); },
                     {"'dram_bandwidth_GBps'", "number", "GB/s", "'fast'"});
  require_fails_with([&] { return apply_override(c, "timing=maybe"); },
                     {"'timing'", "true or false", "'maybe'"});
  require_fails_with([&] { return apply_override(c, "name="); }, {"'name'"});
  // Strings go into JSON, traces and logs: UTF-8 of a bounded length, no control characters.
  require_fails_with([&] { return apply_override(c, "name=chip\xff\xfe"); },
                     {"'name'", "not UTF-8", "byte 4"});
  require_fails_with([&] { return apply_override(c, "name=\xc0\xaf"); },
                     {"'name'", "not UTF-8"});  // overlong '/'
  require_fails_with([&] { return apply_override(c, "name=ab\xe2\x82"); }, {"'name'", "truncated"});
  require_fails_with([&] { return apply_override(c, "name=a\x01b"); },
                     {"'name'", "control character"});
  require_fails_with([&] { return apply_override(c, "name=" + std::string(129, 'x')); },
                     {"'name'", "129 bytes"});
  must(apply_override(c, "name=\xe2\x82\xac-chip"));  // well-formed UTF-8 passes
  CHECK(c.name == "\xe2\x82\xac-chip");
  c.name = "mtia-v2";
  // Nothing changed by the failed attempts.
  CHECK(c.dram_bytes == 128ull << 30);
}

TEST_CASE("validate rejects inconsistent configurations, naming the field", "[config]") {
  const ChipConfig good = must(load_preset("mtia-v2"));
  struct Case {
    const char* assignment;
    const char* expect;
  };
  const Case cases[] = {
      {"generation=3", "generation"},
      {"pe_rows=0", "pe_rows"},
      {"pe_cols=9", "pe_cols"},
      {"clock_hz=0", "clock_hz"},
      {"local_store_bytes=0", "local_store_bytes"},
      {"local_store_bytes=2097152", "local_store_bytes"},
      {"sram_bytes=0", "sram_bytes"},
      {"dram_bytes=0", "dram_bytes"},
      {"dram_bytes=137438953473", "dram_bytes"},  // 128 GiB + 1
      {"dram_bandwidth_GBps=0", "dram_bandwidth_GBps"},
      {"sram_bandwidth_GBps=-5", "sram_bandwidth_GBps"},
      {"pcie_h2d_bandwidth_GBps=0", "pcie_h2d_bandwidth_GBps"},
      {"pcie_d2h_bandwidth_GBps=inf", "pcie_d2h_bandwidth_GBps"},
      {"dram_latency_ns=-1", "dram_latency_ns"},
      {"cp_packet_ns=-3", "cp_packet_ns"},
      {"dma_setup_ns=nan", "dma_setup_ns"},
      {"dram_burst_bytes=48", "dram_burst_bytes"},
      {"pcie_burst_bytes=0", "pcie_burst_bytes"},
      {"sram_burst_bytes=131072", "sram_burst_bytes"},
      {"dma_engines=0", "dma_engines"},
      {"num_queues=0", "num_queues"},
      {"num_queues=17", "num_queues"},
      {"link_count=17", "link_count"},
      {"link_bandwidth_GBps=0", "link_bandwidth_GBps"},
      {"link_latency_ns=-1", "link_latency_ns"},
  };
  for (const auto& tc : cases) {
    INFO(tc.assignment);
    ChipConfig c = good;
    if (!apply_override(c, tc.assignment)) {
      // inf / nan do not even parse as numbers: also a rejection naming the key.
      require_fails_with([&] { return apply_override(c, tc.assignment); }, {tc.expect});
      continue;
    }
    require_fails_with([&] { return validate(c); }, {tc.expect});
  }
}

TEST_CASE("a preset without the link fields loads with their defaults", "[config][link]") {
  auto doc = preset_doc("mtia-v1");
  doc.erase("link_count");
  doc.erase("link_bandwidth_GBps");
  doc.erase("link_latency_ns");
  const ChipConfig c = must(mtia::sim::parse_preset(doc.dump(), "older.json"));
  CHECK(c.link_count == 1);
  CHECK(c.link_bandwidth_GBps == 31.5);
  CHECK(c.link_latency_ns == 1000);
  const ChipConfig v1 = must(load_preset("mtia-v1"));
  CHECK(v1.link_bandwidth_GBps == 15.75);
  CHECK(v1.link_latency_ns == 2000);
}

TEST_CASE("to_json writes every field and reloads as the same configuration", "[config]") {
  ChipConfig c = must(load_preset("mtia-v1"));
  must(apply_override(c, "dma_engines=3"));
  must(apply_override(c, "pcie_latency_ns=750.5"));
  must(apply_override(c, "timing=off"));
  const auto text = to_json(c);
  const auto doc = nlohmann::json::parse(text);
  for (const auto& key : config_keys()) {
    INFO(key.key);
    REQUIRE(doc.contains(key.key));
    CHECK(doc[key.key]["unit"] == key.unit);
    CHECK(!doc[key.key]["description"].get<std::string>().empty());
  }
  CHECK(doc["dma_engines"]["value"] == 3);

  const auto dir = temp_dir("roundtrip");
  write_text(dir / "config.json", text);
  const ChipConfig back = must(load_preset((dir / "config.json").string()));
  CHECK(to_json(back) == text);
  CHECK(back.pcie_latency_ns == 750.5);
  CHECK_FALSE(back.timing);
  std::filesystem::remove_all(dir);
}

TEST_CASE("config_keys describes every field once", "[config]") {
  std::set<std::string> seen;
  for (const auto& key : config_keys()) {
    CHECK(seen.insert(key.key).second);
    CHECK(!key.description.empty());
  }
  CHECK(seen.size() == preset_doc("mtia-v2").size());
}
