/* Small helpers the emulator tests of elementwise-typed kernels share: a seeded uniform in
 * [-1, 1) and conversions between float and a kernel's element type (fp32, or bf16 stored as
 * uint16_t with the project's rounding, engine/ops/elementwise.h). Include after the kernel
 * header that brings elementwise.h in. Not a test framework: each test counts its failures. */
#ifndef FB_EMU_TEST_H
#define FB_EMU_TEST_H
#include <stdint.h>

namespace emu_test {

inline float rnd(uint64_t &s) { /* in [-1, 1) */
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
template <typename E> E to_e(float f) {
  if constexpr (sizeof(E) == 2) return fb_f32_to_bf16(f);
  else return f;
}
template <typename E> double from_e(E e) {
  if constexpr (sizeof(E) == 2) return fb_bf16_to_f32(e);
  else return e;
}

} /* namespace emu_test */
#endif
