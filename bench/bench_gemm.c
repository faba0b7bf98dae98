/* bench_gemm: the CBLAS sgemm ceiling at the GEMM shapes of one gpt2-124m training step
 * (C = 768, 3C, 4C, vocabulary 50257) at B*T tokens (default 256 and 1024), with the transposes
 * the cpu matmul uses (forward inp @ w^T, backward dout @ w and dout^T @ inp). Prints GFLOP/s
 * (median of --reps runs) and the fraction of the fp32 FMA peak, which it measures (a
 * register-only FMA loop on every thread rated by its CPU time, best of a few runs; nothing
 * assumed), for the library's own threading ("cblas") and for the engine's thread-count-independent panel GEMM ("fb_gemm", what
 * the cpu matmul runs), then the step-weighted ceilings (12 layers of four products plus the
 * head) and one machine-readable line per token count:
 *   ceiling tokens=<N> threads=<T> fb_gemm_gflops=<X> peak_gflops=<P>
 * Like the CLI, it re-executes itself with the BLAS kernel override this CPU needs unless
 * --no-hint is given. Not a test.
 * Usage: bench_gemm [--threads N] [--tokens N]... [--reps R] [--fb-only] [--no-hint] */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_timing.h"
#include "engine/ops/blas.h"
#include "engine/ops/ops.h"


#define MAX_REPS 15
#define MAX_TOKENS 8

typedef struct {
  const char *op;
  CBLAS_TRANSPOSE ta, tb;
  int m, n, k;
  int per_step; /* how many times one training step runs this product */
} shape;

typedef void (*gemm_fn)(CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, float, const float *,
                        int, const float *, int, float, float *, int);
static void cblas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c,
                       int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Median seconds of `reps` runs of C[m,n] = op(A) op(B) (after one warm-up run). */
static double time_gemm(gemm_fn f, const shape *s, float *a, float *b, float *c, int reps) {
  int lda = s->ta == CblasNoTrans ? s->k : s->m, ldb = s->tb == CblasNoTrans ? s->n : s->k;
  double t[MAX_REPS];
  f(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    f(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
    t[r] = now_s() - t0;
  }
  return median_of(t, reps);
}

static int usage(const char *arg) {
  fprintf(stderr,
          "bench_gemm: bad argument '%s' (allowed: --threads N>=1, --tokens N>=1 (up to %d "
          "times), --reps 1..%d, --fb-only, --no-hint)\n",
          arg, MAX_TOKENS, MAX_REPS);
  return 2;
}

int main(int argc, char **argv) {
  int threads = 2, use_hint = 1, reps = 5, fb_only = 0, ntok = 0, tokens[MAX_TOKENS];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      if ((threads = atoi(argv[++i])) < 1) return usage(argv[i]);
    } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
      if (ntok == MAX_TOKENS || (tokens[ntok++] = atoi(argv[++i])) < 1) return usage(argv[i]);
    } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
      if (reps < 1 || reps > MAX_REPS) return usage(argv[i]);
    } else if (!strcmp(argv[i], "--fb-only")) {
      fb_only = 1;
    } else if (!strcmp(argv[i], "--no-hint")) {
      use_hint = 0;
    } else {
      return usage(argv[i]);
    }
  }
  if (!ntok) tokens[ntok++] = 256, tokens[ntok++] = 1024;
  const char *hint = use_hint ? fb_blas_kernel_hint() : NULL;
  if (hint) { /* the library reads its kernel choice at load time: restart with it set */
    char name[64];
    const char *eq = strchr(hint, '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq - hint), hint);
    setenv(name, eq + 1, 1);
    execv("/proc/self/exe", argv);
    perror("bench_gemm: re-exec with the BLAS kernel override failed");
  }
  fb_blas_set_threads(threads);
  const double peak = fb_fma_peak(threads, 400000, 5) * 1e-9; /* GFLOP/s */
  printf("BLAS: %s\n", fb_blas_describe());
  printf("fp32 FMA peak (measured, %d threads): %.1f GFLOP/s\n\n", threads, peak);
  const double pk = peak > 0 ? peak : NAN; /* no measured peak: % columns print nan */

  const int C = 768, V = 50257, L = 12;
  for (int ti = 0; ti < ntok; ti++) {
    int N = tokens[ti];
    const shape shapes[] = {
        {"qkv fwd", CblasNoTrans, CblasTrans, N, 3 * C, C, L},
        {"attproj fwd", CblasNoTrans, CblasTrans, N, C, C, L},
        {"fc fwd", CblasNoTrans, CblasTrans, N, 4 * C, C, L},
        {"fcproj fwd", CblasNoTrans, CblasTrans, N, C, 4 * C, L},
        {"lm_head fwd", CblasNoTrans, CblasTrans, N, V, C, 1},
        {"qkv dinp", CblasNoTrans, CblasNoTrans, N, C, 3 * C, L},
        {"attproj dinp", CblasNoTrans, CblasNoTrans, N, C, C, L},
        {"fc dinp", CblasNoTrans, CblasNoTrans, N, C, 4 * C, L},
        {"fcproj dinp", CblasNoTrans, CblasNoTrans, N, 4 * C, C, L},
        {"lm_head dinp", CblasNoTrans, CblasNoTrans, N, C, V, 1},
        {"qkv dw", CblasTrans, CblasNoTrans, 3 * C, C, N, L},
        {"attproj dw", CblasTrans, CblasNoTrans, C, C, N, L},
        {"fc dw", CblasTrans, CblasNoTrans, 4 * C, C, N, L},
        {"fcproj dw", CblasTrans, CblasNoTrans, C, 4 * C, N, L},
        {"lm_head dw", CblasTrans, CblasNoTrans, V, C, N, 1},
    };
    /* largest operands: A = dout[N,V] (head dinp/dw), B = w[V,C], C = logits[N,V] or the
     * head's weight gradient [V,C] */
    size_t big = (size_t)V * (N > C ? N : C), na = big, nb = (size_t)V * C, nc = big;
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4);
    if (!a || !b || !c) {
      fprintf(stderr, "bench_gemm: out of memory\n");
      return 3;
    }
    for (size_t i = 0; i < na; i++) a[i] = (float)((i * 7 + 3) % 13) * 0.01f;
    for (size_t i = 0; i < nb; i++) b[i] = (float)((i * 5 + 1) % 11) * 0.01f;
    printf("B*T = %d tokens, %d threads\n", N, threads);
    printf("%-13s %-3s %6s %6s %6s %9s %7s %9s %7s\n", "product", "op", "M", "N", "K",
           "cblas", "% peak", "fb_gemm", "% peak");
    printf("%-13s %-3s %6s %6s %6s %9s %7s %9s %7s\n", "", "", "", "", "", "GFLOP/s", "",
           "GFLOP/s", "");
    double step_flops = 0, step_t[2] = {0, 0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      const shape *s = &shapes[i];
      double fl = 2.0 * s->m * s->n * s->k;
      double t1 = time_gemm(fb_gemm_f32, s, a, b, c, reps);
      double t0 = fb_only ? t1 : time_gemm(cblas_gemm, s, a, b, c, reps);
      printf("%-13s %c%c  %6d %6d %6d %9.1f %6.1f%% %9.1f %6.1f%%\n", s->op,
             s->ta == CblasTrans ? 'T' : 'N', s->tb == CblasTrans ? 'T' : 'N', s->m, s->n, s->k,
             fl / t0 * 1e-9, 100.0 * fl / t0 * 1e-9 / pk, fl / t1 * 1e-9,
             100.0 * fl / t1 * 1e-9 / pk);
      step_flops += fl * s->per_step;
      step_t[0] += t0 * s->per_step;
      step_t[1] += t1 * s->per_step;
    }
    for (int v = fb_only; v < 2; v++)
      printf("step-weighted GEMM ceiling (%s): %.1f GFLOP/s (%.1f%% of peak), %.3f s per step\n",
             v ? "fb_gemm" : "cblas", step_flops / step_t[v] * 1e-9,
             100.0 * step_flops / step_t[v] * 1e-9 / pk, step_t[v]);
    printf("ceiling tokens=%d threads=%d fb_gemm_gflops=%.2f peak_gflops=%.2f\n\n", N, threads,
           step_flops / step_t[1] * 1e-9, peak);
    free(a), free(b), free(c);
  }
  return 0;
}
