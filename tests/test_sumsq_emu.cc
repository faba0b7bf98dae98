/* The exact norm's cuda kernel (engine/backends/cuda/sumsq_bins.cuh), run on the CPU by the CUDA
 * emulator (tests/cuda_emu): the bins it leaves must hold the exact sum of squares of its input,
 * the sum of every element's own mant^2 * 4^(e - 150) (each element in its own bin, the
 * definition the cpu's bins and fb_norm_bins_exact compare by), computed here as a 640-bit
 * integer independently of the engine; and bin 255 (Inf/NaN) word for word. Inputs: uniform
 * values; starts 1-3 elements off the 16-byte boundary (the scalar head); 2, 256, 257, 300
 * values (head and tail only, one chunk, a chunk and one); exponents from 2^-130 to 2^40 with
 * zeros and denormals (elements under a warp's window, windows that move up and down);
 * denormals only; huge values; Inf and NaN. Each input runs on several grids (1 block, 3, and
 * one block per 256 elements) and block orders and schedules: the exact sum never changes, and
 * on one grid the words do not either. What it cannot check: the GPU's atomics and timing. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "cuda_emu/cuda_emu.h"
#include "engine/backends/cuda/sumsq_bins.cuh"

namespace {

int failures = 0;
constexpr int LIMBS = 12; /* 768 bits: 255 bins of 97-bit words shifted by up to 508 */

/* sum over e < 255 of (bins[2e+1] 2^32 + bins[2e]) 4^e as a little-endian integer */
void exact(const u64 *bins, uint64_t (&n)[LIMBS]) {
  memset(n, 0, sizeof n);
  for (int e = 0; e < 255; e++) {
    const unsigned __int128 t = ((unsigned __int128)bins[2 * e + 1] << 32) + bins[2 * e];
    const uint64_t w0 = (uint64_t)t, w1 = (uint64_t)(t >> 64); /* t < 2^97 */
    const int k = 2 * e / 64, b = 2 * e % 64;
    const uint64_t x[3] = {w0 << b, b ? (w1 << b) | (w0 >> (64 - b)) : w1,
                           b ? w1 >> (64 - b) : 0};
    unsigned __int128 carry = 0;
    for (int j = k; j < LIMBS; j++) {
      const unsigned __int128 s = (unsigned __int128)n[j] + (j - k < 3 ? x[j - k] : 0) + carry;
      n[j] = (uint64_t)s;
      carry = s >> 64;
      if (j - k >= 2 && !carry) break;
    }
    if (carry) fprintf(stderr, "exact: overflow\n"), failures++;
  }
}

/* every element in its own bin: the sum the kernel's bins must equal */
void reference(const float *x, size_t n, std::vector<u64> &bins) {
  bins.assign(2 * SQ_BINS, 0);
  for (size_t i = 0; i < n; i++) {
    uint32_t e;
    uint64_t sq;
    fb_sumsq_decompose(x[i], &e, &sq);
    bins[2 * e] += sq & 0xffffffffu;
    bins[2 * e + 1] += sq >> 32;
  }
}

void run(const float *x, size_t n, unsigned blocks, emu_launch_opts o, std::vector<u64> &bins) {
  bins.assign(2 * SQ_BINS, 0);
  u64 *b = bins.data();
  emu_launch(dim3(blocks), dim3(SQ_THREADS), 0, [&] { sumsq_bins_k(b, x, n); }, o);
}

void check(const char *name, const float *x, size_t n) {
  std::vector<u64> ref, got, first;
  reference(x, n, ref);
  uint64_t want[LIMBS], have[LIMBS];
  exact(ref.data(), want);
  const unsigned grids[3] = {1, 3, (unsigned)((n + 255) / 256)};
  int bad = 0, runs = 0;
  for (unsigned g : grids) {
    for (int order = 0; order < 3; order++) {
      run(x, n, g, emu_launch_opts{(unsigned)(17 * g + order), order}, got);
      exact(got.data(), have);
      const bool same_sum = !memcmp(want, have, sizeof want) && got[510] == ref[510] &&
                            got[511] == ref[511];
      if (!same_sum) {
        bad++;
        fprintf(stderr, "FAIL %s (n=%zu, %u blocks, order %d): exact sum differs\n", name, n, g,
                order);
      }
      if (order == 0) first = got;
      else if (got != first) {
        bad++;
        fprintf(stderr, "FAIL %s (n=%zu, %u blocks, order %d): words differ from order 0\n",
                name, n, g, order);
      }
      runs++;
    }
  }
  failures += bad;
  printf("  %-36s n=%-6zu %d runs, exact sum %s\n", name, n, runs, bad ? "DIFFERS" : "equal");
}

struct rng {
  uint64_t s;
  float uniform() { /* in [-1, 1) */
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
  }
};

} // namespace

int main(void) {
  rng r{12345};
  const size_t N = 20003;
  std::vector<float> buf(N + 64);
  /* a 16-byte aligned base, so offsets give the heads they name */
  float *x = buf.data() + ((16 - ((uintptr_t)buf.data() & 15)) & 15) / 4;
  for (size_t i = 0; i < N; i++) x[i] = r.uniform();
  check("uniform", x, N);
  check("uniform, start 1 past the boundary", x + 1, N - 1);
  check("uniform, start 3 past, 300 values", x + 3, 300);
  check("start 2 past, 2 values", x + 2, 2);
  check("one chunk", x, 256);
  check("a chunk and one, start 1 past", x + 1, 257);
  for (size_t i = 0; i < N; i++) {
    const int e = (int)(fabsf(r.uniform()) * 171.0f) - 130; /* 2^-130 .. 2^40 */
    x[i] = i % 7 == 0 ? 0.0f : i % 97 == 0 ? 1e-42f * (float)(i % 3) : ldexpf(r.uniform(), e);
  }
  check("exponents 2^-130..2^40, zeros, denormals", x, N);
  check("the same, start 1 past", x + 1, N - 1);
  for (size_t i = 0; i < 3000; i++) x[i] = ldexpf(r.uniform(), -149 + (int)(i % 10));
  check("denormals and the smallest normals", x, 3000);
  for (size_t i = 0; i < 3000; i++) x[i] = ldexpf(r.uniform(), 100 + (int)(i % 27));
  check("huge values", x, 3000);
  for (size_t i = 0; i < 3000; i++) x[i] = r.uniform();
  x[1000] = INFINITY;
  x[2001] = NAN;
  check("with Inf and NaN", x, 3000);
  if (failures) {
    fprintf(stderr, "test_sumsq_emu: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_sumsq_emu: every input's exact sum of squares equal on every grid and order\n");
  return 0;
}
