/* The CBLAS library behind the matrix products: which one runs (library, version, kernel,
 * threads), how many threads it uses, which kernel override this CPU needs, and the GEMM
 * ceiling it reaches here. The build picks the library (FB_BLAS_OPENBLAS or FB_BLAS_BLIS);
 * this header brings in the matching cblas.h. It does not run any op: see ops.h. */
#ifndef FB_BLAS_H
#define FB_BLAS_H

#if defined(FB_BLAS_BLIS)
#if __has_include(<blis/cblas.h>)
#include <blis/cblas.h>
#else
#include <cblas.h> /* Debian: include dir .../blis-openmp holds BLIS's cblas.h */
#endif
/* BLIS names the enums without typedefs (OpenBLAS has both) */
typedef enum CBLAS_TRANSPOSE CBLAS_TRANSPOSE;
#else
#include <cblas.h>
#endif

/* "OpenBLAS 0.3.21 SkylakeX, 2 threads, gemm panels for 2 cpus" / "BLIS 0.9.0 skx, ..."
 * (static storage; the panel count basis is fb_ops_gemm_split_procs). */
const char *fb_blas_describe(void);
/* Threads the library's GEMM uses from the calling thread (also sets that thread's OpenMP
 * count, which the OpenMP builds of both libraries follow). n < 1 is treated as 1. */
void fb_blas_set_threads(int n);
/* The environment assignment ("NAME=value", static) this process should run with to get the
 * right kernel on this CPU when the library would misdetect it; NULL when nothing is needed
 * (already set by the user, or the detected kernel is already right). main() sets it and
 * re-executes itself before the library initialises. */
const char *fb_blas_kernel_hint(void);
/* GOMP_SPINCOUNT the CLI runs with unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT:
 * idle OpenMP threads sleep at once instead of spinning. Measured on the shared 2-core machine
 * (gpt2-124m, 4 x 64, 2 threads, under load): step 13.3 s and 22 s of CPU with libgomp's default
 * spinning, 11.0 s with 10000, 4.8 s and 9.8 s of CPU with 0. Read by libgomp when it loads, so
 * main() sets it and re-executes itself (with the kernel override, if any, in the same exec). */
#define FB_GOMP_SPINCOUNT "0"

#endif
