// The SE's transcendental functions over blocks of fp32 values, in place. On x86-64 they run
// through glibc's vector math library (libmvec, whose functions are within a few ulp like the
// scalar ones): eight lanes at a time on a CPU with AVX2, four otherwise; elsewhere they loop
// over the C library's functions. The results never depend on a value's position in the
// block; exp, sigmoid and SiLU may differ in the last bit between the AVX2 and the other
// builds (each build of libmvec rounds its own way), tanh does not (it is correctly rounded).
#pragma once

#include <cstddef>

namespace mtia::sim::pe::detail {

void exp_block(float* v, size_t n);      // e^v
void sigmoid_block(float* v, size_t n);  // 1 / (1 + e^-v), tiny results kept for large -v
void silu_block(float* v, size_t n);     // v * sigmoid(v); -0 at -Inf
// tanh from one double-precision exp, rounded once to float: e^2|v| in double leaves the
// quotient far more precise than float needs, so the result is the correctly rounded tanh in
// practice (checked against a long double reference in tests/pe).
void tanh_block(float* v, size_t n);

const char* vector_math_variant();  // "avx2" or "baseline": the build the functions above use

// The builds the functions above choose between (vector_math_avx2.cpp needs AVX2).
namespace baseline {
void exp_block(float* v, size_t n);
void sigmoid_block(float* v, size_t n);
void silu_block(float* v, size_t n);
void tanh_block(float* v, size_t n);
}  // namespace baseline
namespace avx2 {
void exp_block(float* v, size_t n);
void sigmoid_block(float* v, size_t n);
void silu_block(float* v, size_t n);
void tanh_block(float* v, size_t n);
}  // namespace avx2

}  // namespace mtia::sim::pe::detail
