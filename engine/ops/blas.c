/* Which CBLAS runs and how fast: description, thread count, kernel override hint for CPUs the
 * library misdetects (Debian's OpenBLAS 0.3.21 takes Emerald Rapids for Prescott, BLIS 0.9
 * picks its AVX2 kernels), and a short sgemm ceiling measurement. No op math here. */
#include "blas.h"
#include "ops.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(FB_BLAS_BLIS)
#if __has_include(<blis/blis.h>)
#include <blis/blis.h>
#else
#include <blis.h>
#endif
#endif

#if !defined(FB_BLAS_BLIS)
static int cpu_has_avx512f(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return 0;
#endif
}
#endif

#if defined(FB_BLAS_BLIS)
const char *fb_blas_describe(void) {
  static char buf[160];
  snprintf(buf, sizeof buf, "BLIS %s %s, %d threads, gemm panels for %d cpus",
           bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()),
           omp_get_max_threads(), fb_ops_gemm_split_procs());
  return buf;
}

void fb_blas_set_threads(int n) {
  if (n < 1) n = 1;
  omp_set_num_threads(n);
  bli_thread_set_num_threads(n);
}

const char *fb_blas_kernel_hint(void) {
  /* BLIS aborts on an override naming an architecture it was not built with, and Debian's
   * libblis4-openmp 0.9.0 ships no skx kernels (haswell is its best here): no override. */
  return NULL;
}
#else
char *openblas_get_config(void);
char *openblas_get_corename(void);

const char *fb_blas_describe(void) {
  static char buf[160];
  /* config reads "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY ..."; keep name and version */
  char name[32] = "OpenBLAS", ver[32] = "?";
  const char *cfg = openblas_get_config();
  if (cfg) sscanf(cfg, "%31s %31s", name, ver);
  snprintf(buf, sizeof buf, "%s %s %s, %d threads, gemm panels for %d cpus", name, ver,
           openblas_get_corename(), omp_get_max_threads(), fb_ops_gemm_split_procs());
  return buf;
}

void fb_blas_set_threads(int n) {
  if (n < 1) n = 1;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

const char *fb_blas_kernel_hint(void) {
  if (getenv("OPENBLAS_CORETYPE") || !cpu_has_avx512f()) return NULL;
  static const char *const avx512_cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
  const char *core = openblas_get_corename();
  for (size_t i = 0; core && i < sizeof avx512_cores / sizeof avx512_cores[0]; i++)
    if (!strcasecmp(core, avx512_cores[i])) return NULL;
  return "OPENBLAS_CORETYPE=SkylakeX";
}
#endif

