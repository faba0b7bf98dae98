/* The cross-entropy kernel (engine/backends/cuda/xent_rows.cuh: online max and sum, then the
 * gradient), run on the CPU by the CUDA emulator (tests/cuda_emu), against a double-precision
 * reference on the same fp32 or bf16 logits: every row's loss and the gradient
 * (softmax - onehot) * dscale, zero rows for ignored targets (-1), and zeros in the padding
 * columns [V, ld) of a padded vocabulary. Widths: whole 16-byte vectors (300 fp32), odd (301,
 * element by element), odd in padded rows (301 of 384, 2001 of 2048, 5000 of 5120: vectors and
 * a scalar tail); targets at the first and last logical column. Every case runs again with
 * another block order and schedule: the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "cuda_emu/cuda_emu.h"
#include "engine/backends/cuda/xent_rows.cuh"
#include "cuda_emu/emu_test.h"

namespace {

int failures = 0;

using emu_test::from_e;
using emu_test::rnd;
using emu_test::to_e;

template <typename E> void check(int N, int V, int ld) {
  uint64_t s = 5 + (uint64_t)V * 7 + ld;
  /* a 16-byte aligned start, so padded rows take the vector path */
  std::vector<E> buf((size_t)N * ld + 16);
  E *l = buf.data() + ((16 - ((uintptr_t)buf.data() & 15)) & 15) / sizeof(E);
  for (size_t i = 0; i < (size_t)N * ld; i++) l[i] = to_e<E>(6.0f * rnd(s));
  std::vector<int32_t> tgt(N);
  for (int n = 0; n < N; n++) tgt[n] = n % 5 == 4 ? -1 : n % 5 == 3 ? V - 1 : (n * 37) % V;
  const float dscale = 1.0f / (float)N;
  std::vector<double> rl(N, 0.0), rg((size_t)N * ld, 0.0);
  for (int n = 0; n < N; n++) {
    if (tgt[n] < 0) continue;
    const E *x = l + (size_t)n * ld;
    double m = -INFINITY, sum = 0;
    for (int j = 0; j < V; j++) m = fmax(m, from_e(x[j]));
    for (int j = 0; j < V; j++) sum += exp(from_e(x[j]) - m);
    rl[n] = m + log(sum) - from_e(x[tgt[n]]);
    for (int j = 0; j < V; j++)
      rg[(size_t)n * ld + j] = exp(from_e(x[j]) - m) / sum * dscale - (j == tgt[n] ? dscale : 0);
  }
  std::vector<E> in(l, l + (size_t)N * ld), second;
  std::vector<double> rows(N), rows2(N);
  double *rp = rows.data();
  const int32_t *tp = tgt.data();
  emu_launch(dim3(N), dim3(XENT_THREADS), 0,
             [&] { xent_rows_k<E>(l, rp, tp, 0, V, ld, dscale); }, emu_launch_opts{3u, 0});
  std::vector<E> first(l, l + (size_t)N * ld);
  memcpy(l, in.data(), in.size() * sizeof(E));
  rp = rows2.data();
  emu_launch(dim3(N), dim3(XENT_THREADS), 0,
             [&] { xent_rows_k<E>(l, rp, tp, 0, V, ld, dscale); }, emu_launch_opts{71u, 2});
  double eg = 0, mg = 0, el = 0;
  bool pad = true;
  for (int n = 0; n < N; n++) {
    el = fmax(el, fabs(rows[n] - rl[n]) / fmax(fabs(rl[n]), 1e-30));
    for (int j = 0; j < ld; j++) {
      const double g = from_e(first[(size_t)n * ld + j]);
      if (j >= V) {
        pad = pad && g == 0.0;
        continue;
      }
      eg = fmax(eg, fabs(g - rg[(size_t)n * ld + j]));
      mg = fmax(mg, fabs(rg[(size_t)n * ld + j]));
    }
  }
  const bool same = rows == rows2 && !memcmp(first.data(), l, first.size() * sizeof(E));
  const double tol = sizeof(E) == 2 ? 1e-2 : 1e-5;
  const bool ok = eg / mg < tol && el < 1e-5 && pad && same;
  if (!ok) failures++;
  printf("  %s %3d rows of %4d in %4d: gradient %.1e, loss %.1e, padding %s, %s%s\n",
         sizeof(E) == 2 ? "bf16" : "fp32", N, V, ld, eg / mg, el, pad ? "zero" : "NOT ZERO",
         same ? "same bits on another order" : "BITS DIFFER", ok ? "" : "  FAIL");
}

} // namespace

int main(void) {
  check<float>(19, 300, 300);
  check<bf16>(19, 300, 300);
  check<bf16>(19, 301, 301);
  check<float>(9, 301, 384);
  check<bf16>(9, 301, 384);
  check<float>(7, 2001, 2048);
  check<bf16>(6, 5000, 5120);
  if (failures) {
    fprintf(stderr, "test_xent_emu: %d case(s) failed\n", failures);
    return 1;
  }
  printf("test_xent_emu: every case within bounds, padding zero, the same bits on every order\n");
  return 0;
}
