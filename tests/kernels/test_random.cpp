// The `philox` kernel of kernels/lib/random.c against a reference Philox-4x32-10 written here
// from the algorithm's definition, itself checked against the published known-answer vectors:
// word counts that end inside a block and across PE shares, 1 to 64 PEs, a seed read from
// device memory, and the kernel's refusals (a misaligned seed or output, a short argument
// block, an unknown mode), which leave the output untouched; and mode 1's uniform floats.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <vector>

#include "check.h"

using namespace kt;

namespace {

// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
std::array<uint32_t, 4> philox_ref(std::array<uint32_t, 4> c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0];
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1,
         uint32_t(p0)};
  }
  return c;
}

// What the kernel must write: word i is lane i % 4 of Philox(seed, {i / 4, stream}).
std::vector<uint32_t> expected_words(uint64_t seed, uint64_t stream, uint64_t words) {
  std::vector<uint32_t> out(words);
  for (uint64_t i = 0; i < words; ++i) {
    const uint64_t block = i / 4;
    out[i] = philox_ref(
        {uint32_t(block), uint32_t(block >> 32), uint32_t(stream), uint32_t(stream >> 32)},
        uint32_t(seed), uint32_t(seed >> 32))[i % 4];
  }
  return out;
}

// Mode 1's floats: the low 24 bits of each word times 2^-24 (exact in float32).
std::vector<uint32_t> expected_uniform_bits(uint64_t seed, uint64_t stream, uint64_t words) {
  std::vector<uint32_t> out = expected_words(seed, stream, words);
  for (uint32_t& w : out) {
    const float f = static_cast<float>(w & 0xFFFFFFu) * 0x1p-24f;
    std::memcpy(&w, &f, 4);
  }
  return out;
}

struct Run {
  LaunchResult result;
  std::vector<uint32_t> words;  // bit patterns
};

Run run_philox(uint64_t seed, uint64_t stream, uint64_t words, uint32_t pes, int64_t mode = 0,
               uint64_t seed_misalign = 0, uint64_t out_misalign = 0) {
  Device dev;
  const uint64_t seed_at = dev.alloc(16) + seed_misalign;
  dev.write(seed_at, &seed, 8);
  const uint64_t out_at = dev.alloc(words * 4 + 8) + out_misalign;
  Run r;
  r.result = dev.launch(
      Module::library(), "philox",
      {ptr(out_at), ptr(seed_at), i64(int64_t(words)), i64(int64_t(stream)), i64(mode)}, grid(pes));
  r.words.resize(words);
  if (words > 0) dev.read(out_at, r.words.data(), words * 4);
  return r;
}

}  // namespace

TEST_CASE("the reference Philox-4x32-10 gives the published known answers", "[kernels][random]") {
  // Random123's kat_vectors for philox4x32_10.
  CHECK(philox_ref({0, 0, 0, 0}, 0, 0) ==
        std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox_ref({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0) ==
        std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("philox writes the Philox words of its seed and stream", "[kernels][random]") {
  const uint64_t seed = 0x0123456789abcdefull, stream = 0x500000007ull;
  for (uint32_t pes : {1u, 4u, 64u}) {
    for (uint64_t words : {1ull, 3ull, 4ull, 5ull, 4097ull, 20000ull}) {
      CAPTURE(pes, words);
      const Run r = run_philox(seed, stream, words, pes);
      REQUIRE(r.result.ok());
      CHECK(r.words == expected_words(seed, stream, words));
    }
  }
  // Mode 1: the same words as uniform floats in [0, 1).
  for (uint64_t words : {7ull, 4097ull, 20000ull}) {
    CAPTURE(words);
    const Run r = run_philox(seed, stream, words, 16, 1);
    REQUIRE(r.result.ok());
    CHECK(r.words == expected_uniform_bits(seed, stream, words));
  }
  // Another seed or another stream: other words.
  const Run a = run_philox(1, 0, 64, 4), b = run_philox(2, 0, 64, 4), c = run_philox(1, 1, 64, 4);
  REQUIRE((a.result.ok() && b.result.ok() && c.result.ok()));
  CHECK(a.words == expected_words(1, 0, 64));
  CHECK(a.words != b.words);
  CHECK(a.words != c.words);
}

TEST_CASE("philox with no words writes nothing", "[kernels][random]") {
  const Run r = run_philox(7, 0, 0, 4);
  CHECK(r.result.ok());
}

TEST_CASE("philox refuses a misaligned seed or output, or an unknown mode, and leaves the output",
          "[kernels][random]") {
  for (auto [seed_off, out_off] : {std::pair<uint64_t, uint64_t>{4, 0}, {0, 2}}) {
    CAPTURE(seed_off, out_off);
    const Run r = run_philox(7, 0, 16, 2, 0, seed_off, out_off);
    CHECK(r.result.status() == MTIA_KSTATUS_BAD_SHAPE);
    for (uint32_t w : r.words) CHECK(w == 0xA5A5A5A5u);  // Device::alloc's fill, untouched
  }
  const Run bad_mode = run_philox(7, 0, 16, 2, 2);
  CHECK(bad_mode.result.status() == MTIA_KSTATUS_BAD_OP);
  for (uint32_t w : bad_mode.words) CHECK(w == 0xA5A5A5A5u);
  Device dev;
  std::vector<uint8_t> short_block(32, 0);
  const LaunchResult r = dev.run(Module::library().program("philox"), short_block, grid(1));
  CHECK(r.status() == MTIA_KSTATUS_BAD_ARG_BYTES);
}
