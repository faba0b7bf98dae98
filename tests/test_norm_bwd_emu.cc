/* The one-pass layernorm / rmsnorm backward (engine/backends/cuda/norm_bwd.cuh: norm_bwd_1p_k, then
 * colsum_tree_k for the weight and bias gradients), run on the CPU by the CUDA emulator
 * (tests/cuda_emu), against a double-precision reference on the same fp32 or bf16 inputs:
 * dinp (accumulated into its old values), dw and db (accumulated). Shapes: rows of 96, 64 and
 * 2048 columns, blocks of one row and of several (the partitions a run's scratch gives), a last
 * partition shorter than the others. Every case runs again with other block orders and
 * schedules: the results must be the same bits. What it cannot check: timing, the GPU's FMA
 * contraction (the bounds allow for it). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "cuda_emu/cuda_emu.h"
#include "engine/backends/cuda/norm_bwd.cuh"
#include "cuda_emu/emu_test.h"

namespace {

int failures = 0;

using emu_test::from_e;
using emu_test::rnd;
using emu_test::to_e;

template <typename E> struct data {
  std::vector<E> x, d, di, w, dw, db;
  std::vector<float> mean, rstd, part;
};

template <typename E, bool RMS> void launch(data<E> &t, int N, int C, int R, emu_launch_opts o) {
  constexpr int K = VEC(E);
  const unsigned threads = (unsigned)((C / K + 31) / 32 * 32);
  t.part.assign((size_t)2 * R * C, NAN);
  E *di = t.di.data(), *dw = t.dw.data(), *db = t.db.data();
  const E *d = t.d.data(), *x = t.x.data(), *w = t.w.data();
  const float *mean = t.mean.data(), *rstd = t.rstd.data();
  float *part = t.part.data();
  emu_launch(dim3(R), dim3(threads), 0,
             [&] { norm_bwd_1p_k<E, RMS>(di, part, d, x, w, mean, rstd, N, C, R); }, o);
  emu_launch(dim3((C + 31) / 32), dim3(1024), 0, [&] { colsum_tree_k<E>(dw, part, R, C); }, o);
  if (!RMS)
    emu_launch(dim3((C + 31) / 32), dim3(1024), 0,
               [&] { colsum_tree_k<E>(db, part + (size_t)R * C, R, C); }, o);
}

template <typename E, bool RMS> void check(int N, int C, int R) {
  const char *dt = sizeof(E) == 2 ? "bf16" : "fp32", *op = RMS ? "rmsnorm" : "layernorm";
  uint64_t s = 77 + 131 * (uint64_t)N + C;
  data<E> in;
  auto fill = [&](std::vector<E> &v, size_t n) {
    v.resize(n);
    for (auto &e : v) e = to_e<E>(rnd(s));
  };
  fill(in.x, (size_t)N * C), fill(in.d, (size_t)N * C), fill(in.di, (size_t)N * C);
  fill(in.w, C), fill(in.dw, C), fill(in.db, C);
  in.mean.resize(N), in.rstd.resize(N);
  for (int n = 0; n < N; n++) in.mean[n] = RMS ? 0.0f : 0.1f * rnd(s), in.rstd[n] = 1 + 0.5f * rnd(s);
  /* the reference, in double from the same (rounded) inputs */
  std::vector<double> rdi((size_t)N * C), rdw(C), rdb(C);
  for (int c = 0; c < C; c++) rdw[c] = from_e(in.dw[c]), rdb[c] = from_e(in.db[c]);
  for (int n = 0; n < N; n++) {
    double s1 = 0, s2 = 0;
    const size_t o = (size_t)n * C;
    for (int c = 0; c < C; c++) {
      const double dn = from_e(in.d[o + c]) * from_e(in.w[c]);
      const double nrm = (from_e(in.x[o + c]) - in.mean[n]) * in.rstd[n];
      s1 += dn, s2 += dn * nrm;
    }
    for (int c = 0; c < C; c++) {
      const double dn = from_e(in.d[o + c]) * from_e(in.w[c]);
      const double nrm = (from_e(in.x[o + c]) - in.mean[n]) * in.rstd[n];
      rdi[o + c] = from_e(in.di[o + c]) + in.rstd[n] * (dn - (RMS ? 0 : s1 / C) - nrm * s2 / C);
      rdw[c] += from_e(in.d[o + c]) * nrm;
      rdb[c] += from_e(in.d[o + c]);
    }
  }
  data<E> a = in, b = in;
  launch<E, RMS>(a, N, C, R, emu_launch_opts{1u, 0});
  launch<E, RMS>(b, N, C, R, emu_launch_opts{99u, 2});
  auto err = [](const std::vector<E> &g, const std::vector<double> &r) {
    double e = 0, m = 0;
    for (size_t i = 0; i < r.size(); i++)
      e = fmax(e, fabs(from_e(g[i]) - r[i])), m = fmax(m, fabs(r[i]));
    return e / m;
  };
  const double tol = sizeof(E) == 2 ? 1e-2 : 2e-6;
  const double e1 = err(a.di, rdi), e2 = err(a.dw, rdw), e3 = RMS ? 0 : err(a.db, rdb);
  const bool same = a.di == b.di && a.dw == b.dw && a.db == b.db;
  const bool ok = e1 < tol && e2 < tol && e3 < tol && same && (!RMS || a.db == in.db);
  if (!ok) failures++;
  printf("  %-9s %s %4d x %-4d in %3d blocks: dinp %.1e dw %.1e db %.1e (tol %.0e), %s%s\n",
         op, dt, N, C, R, e1, e2, e3, tol, same ? "same bits on another order" : "BITS DIFFER",
         ok ? "" : "  FAIL");
}

} // namespace

int main(void) {
  check<float, true>(37, 96, 37);
  check<bf16, true>(37, 96, 37);
  check<float, false>(37, 96, 37);
  check<bf16, false>(37, 96, 37);
  check<float, true>(100, 64, 7);   /* 15 rows a block, the last 10 */
  check<bf16, false>(100, 64, 33);  /* 4 rows a block; the last 8 blocks have none */
  check<bf16, true>(300, 64, 300); /* one row a block */
  check<float, false>(9, 2048, 9);
  check<bf16, true>(5, 2048, 3);
  if (failures) {
    fprintf(stderr, "test_norm_bwd_emu: %d case(s) failed\n", failures);
    return 1;
  }
  printf("test_norm_bwd_emu: every case within bounds and the same bits on every order\n");
  return 0;
}
