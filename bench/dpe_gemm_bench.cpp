// The DPE's tile products on each small-GEMM library this build has, against Eigen (the
// emulator's first DPE backend), in one run: fp32 C += A.B on the tile shapes of
// kernels/lib/matmul.c, row-major as the local store holds them, with A or B transposed, and
// contiguous operands (what the fp16/bf16 path hands over after widening) as well as padded
// rows. Each product runs single-threaded, as the DPE's products do.
//
// Usage: bench_dpe_gemm [--ms N] [--rounds N]
//   OPENBLAS_CORETYPE=SkylakeX bench_dpe_gemm   (OpenBLAS picks its kernel at load time only)
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "mtia/sim/pe/sgemm.h"

#if defined(MTIA_BENCH_HAVE_BLIS)
#include <blis.h>
#include <dlfcn.h>
#endif

extern "C" {
char* openblas_get_corename(void);
void openblas_set_num_threads(int);
}

namespace {

using mtia::sim::pe::SgemmFn;

// ---- The candidates, each behind the DPE's sgemm signature ------------------------------------

void openblas_sgemm(bool ta, bool tb, uint32_t m, uint32_t n, uint32_t k, const float* a,
                    size_t lda, const float* b, size_t ldb, bool acc, float* c, size_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), acc ? 1.0f : 0.0f, c,
              static_cast<int>(ldc));
}

#if defined(MTIA_BENCH_HAVE_BLIS)
// BLIS is opened at run time, its symbols kept local: linked, its own CBLAS would take
// cblas_sgemm from OpenBLAS.
struct Blis {
  decltype(&bli_init) init = nullptr;
  decltype(&bli_sgemm) sgemm = nullptr;
  decltype(&bli_arch_query_id) arch_query_id = nullptr;
  decltype(&bli_arch_string) arch_string = nullptr;
  bool open() {
    void* h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return false;
    init = reinterpret_cast<decltype(init)>(dlsym(h, "bli_init"));
    sgemm = reinterpret_cast<decltype(sgemm)>(dlsym(h, "bli_sgemm"));
    arch_query_id = reinterpret_cast<decltype(arch_query_id)>(dlsym(h, "bli_arch_query_id"));
    arch_string = reinterpret_cast<decltype(arch_string)>(dlsym(h, "bli_arch_string"));
    return init && sgemm && arch_query_id && arch_string;
  }
} blis;

// BLIS takes both strides of every operand, so a transpose is only a swap of strides.
void blis_sgemm(bool ta, bool tb, uint32_t m, uint32_t n, uint32_t k, const float* a, size_t lda,
                const float* b, size_t ldb, bool acc, float* c, size_t ldc) {
  float one = 1.0f, beta = acc ? 1.0f : 0.0f;
  const inc_t la = static_cast<inc_t>(lda), lb = static_cast<inc_t>(ldb);
  blis.sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, const_cast<float*>(a),
             ta ? 1 : la, ta ? la : 1, const_cast<float*>(b), tb ? 1 : lb, tb ? lb : 1, &beta, c,
             static_cast<inc_t>(ldc), 1);
}
#endif

struct Candidate {
  std::string name;
  SgemmFn fn;
};

struct Shape {
  uint32_t m, n, k;
};

// One layout of one shape: `sets` tile sets in turn, so that they do not all sit in L1/L2 (in
// the emulator the operands come from 64 PEs' local stores).
struct Case {
  Shape s;
  bool ta, tb;
  uint32_t pad;  // extra elements per row of every operand
  size_t lda, ldb, ldc, a_size, b_size, c_size;
  int sets;
  std::vector<float> a, b, c;

  Case(Shape s_, bool ta_, bool tb_, uint32_t pad_) : s(s_), ta(ta_), tb(tb_), pad(pad_) {
    lda = (ta ? s.m : s.k) + pad;
    ldb = (tb ? s.k : s.n) + pad;
    ldc = s.n + pad;
    a_size = (ta ? s.k : s.m) * lda;
    b_size = (tb ? s.n : s.k) * ldb;
    c_size = s.m * ldc;
    const size_t bytes = (a_size + b_size + c_size) * sizeof(float);
    sets = static_cast<int>(std::clamp<size_t>((8u << 20) / bytes, 1, 64));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    a.resize(a_size * sets);
    b.resize(b_size * sets);
    c.assign(c_size * sets, 0.0f);
    for (float& x : a) x = d(rng);
    for (float& x : b) x = d(rng);
  }

  void run(SgemmFn fn, int i) {
    const int t = i % sets;
    fn(ta, tb, s.m, s.n, s.k, a.data() + a_size * t, lda, b.data() + b_size * t, ldb, true,
       c.data() + c_size * t, ldc);
  }

  std::string label() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%ux%ux%u %s%s%s", s.m, s.n, s.k, ta ? "T" : "N", tb ? "T" : "N",
                  pad ? " pad" : "");
    return buf;
  }
};

// Max relative difference of one product against a double reference.
double max_error(SgemmFn fn, const Case& cs) {
  Case c = cs;
  std::fill(c.c.begin(), c.c.end(), 0.0f);
  c.run(fn, 0);
  double worst = 0;
  for (uint32_t i = 0; i < c.s.m; ++i) {
    for (uint32_t j = 0; j < c.s.n; ++j) {
      double want = 0, mag = 0;
      for (uint32_t p = 0; p < c.s.k; ++p) {
        const double x = c.ta ? c.a[p * c.lda + i] : c.a[i * c.lda + p];
        const double y = c.tb ? c.b[j * c.ldb + p] : c.b[p * c.ldb + j];
        want += x * y;
        mag += std::fabs(x * y);
      }
      worst = std::max(worst, std::fabs(c.c[i * c.ldc + j] - want) / std::max(mag, 1e-30));
    }
  }
  return worst;
}

// Products per timed batch of about `ms` milliseconds (after a warm-up: JIT, packing
// buffers, pages).
int calls_per_batch(Case& c, SgemmFn fn, double ms) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < c.sets; ++i) c.run(fn, i);
  for (int calls = 1;; calls *= 2) {
    const auto t0 = clock::now();
    for (int i = 0; i < calls; ++i) c.run(fn, i);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s * 1e3 >= ms / 4 || calls > (1 << 24)) {
      return std::max(1, static_cast<int>(calls * (ms * 1e-3) / std::max(s, 1e-9)));
    }
  }
}

// Seconds per product of one batch.
double time_batch(Case& c, SgemmFn fn, int calls) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  for (int i = 0; i < calls; ++i) c.run(fn, i);
  return std::chrono::duration<double>(clock::now() - t0).count() / calls;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The DPE's tile products on each small-GEMM library, against Eigen"};
  double ms = 20;
  int rounds = 5;
  app.add_option("--ms", ms, "milliseconds per timed batch (default 20)");
  app.add_option("--rounds", rounds, "timed batches per library and case, best kept (default 5)");
  CLI11_PARSE(app, argc, argv);

  openblas_set_num_threads(1);  // a DPE product runs on one host thread
  // The emulator's builds: Eigen's per instruction set, the widest first (the reference column).
  std::vector<Candidate> libs;
  const size_t eigen = 0;
  for (const auto& b : mtia::sim::pe::sgemm_builds()) {
    libs.push_back({std::string("eigen-") + b.name, b.fn});
  }
  libs.push_back({std::string("openblas-") + openblas_get_corename(), &openblas_sgemm});
#if defined(MTIA_BENCH_HAVE_BLIS)
  if (blis.open()) {
    blis.init();
    libs.push_back({std::string("blis-") + blis.arch_string(blis.arch_query_id()), &blis_sgemm});
  } else {
    std::printf("BLIS: libblis.so.4 not found (%s)\n", dlerror());
  }
#endif
  std::printf("The emulator's DPE uses %s on this host.\n", mtia::sim::pe::sgemm_variant());

  const Shape shapes[] = {{128, 128, 96}, {128, 128, 64}, {128, 128, 32},
                          {128, 64, 32},  {64, 64, 64},   {64, 64, 32},
                          {32, 32, 32},   {16, 16, 16},   {8, 8, 8}};
  std::printf(
      "fp32 C += A.B, row-major tiles, one thread; GFLOP/s (x Eigen %s); best of %d "
      "batches of %.0f ms\n",
      libs[eigen].name.c_str(), rounds, ms);
  std::printf("%-22s", "tile m x n x k");
  for (const Candidate& l : libs) std::printf(" %22s", l.name.c_str());
  std::printf("\n");
  std::vector<double> log_sum(libs.size(), 0.0);
  int cases = 0;
  for (const Shape& s : shapes) {
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout == 2, tb = layout == 1;
      const uint32_t pad = layout == 3 ? 16 : 0;
      Case c(s, ta, tb, pad);
      std::vector<double> secs(libs.size(), 1e30);
      std::vector<int> calls(libs.size());
      for (size_t i = 0; i < libs.size(); ++i) {
        if (max_error(libs[i].fn, c) > 1e-5) {
          std::printf("%s: %s gives wrong results\n", c.label().c_str(), libs[i].name.c_str());
          return 1;
        }
        calls[i] = calls_per_batch(c, libs[i].fn, ms);
      }
      // Rounds interleave the libraries, so that each meets the machine's quiet and busy
      // moments alike; the best batch of each is kept.
      for (int r = 0; r < rounds; ++r) {
        for (size_t i = 0; i < libs.size(); ++i) {
          secs[i] = std::min(secs[i], time_batch(c, libs[i].fn, calls[i]));
        }
      }
      std::printf("%-22s", c.label().c_str());
      const double flop = 2.0 * s.m * s.n * s.k;
      for (size_t i = 0; i < libs.size(); ++i) {
        char cell[32];
        std::snprintf(cell, sizeof cell, "%.1f (%.2f)", flop / secs[i] * 1e-9,
                      secs[eigen] / secs[i]);
        std::printf(" %22s", cell);
        log_sum[i] += std::log(secs[eigen] / secs[i]);
      }
      std::printf("\n");
      ++cases;
    }
  }
  std::printf("%-22s", "geomean x Eigen");
  for (size_t i = 0; i < libs.size(); ++i) std::printf(" %22.2f", std::exp(log_sum[i] / cases));
  std::printf("\n");
  return 0;
}
