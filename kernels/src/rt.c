/* The freestanding runtime every kernel links: clang may lower struct copies and
 * initialisation to these calls even with -ffreestanding. */
#include <stddef.h>
#include <stdint.h>

void* memset(void* dst, int c, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  while (n-- > 0) *d++ = (unsigned char)c;
  return dst;
}

void* memcpy(void* restrict dst, const void* restrict src, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  const unsigned char* s = (const unsigned char*)src;
  while (n-- > 0) *d++ = *s++;
  return dst;
}

void* memmove(void* dst, const void* src, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  const unsigned char* s = (const unsigned char*)src;
  if (d < s) {
    while (n-- > 0) *d++ = *s++;
  } else {
    while (n-- > 0) d[n] = s[n];
  }
  return dst;
}

int memcmp(const void* a, const void* b, size_t n) {
  const unsigned char* x = (const unsigned char*)a;
  const unsigned char* y = (const unsigned char*)b;
  for (size_t i = 0; i < n; ++i) {
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  }
  return 0;
}
