/* The CPU math: forward and backward of every op, in float (_f32, what the cpu device runs)
 * and double (_f64, the reference the gradient checks use). One body (ops_impl.h) is compiled
 * for both precisions. Ops thread with OpenMP over independent rows, heads, column blocks or
 * fixed element blocks only, so every result is bitwise independent of the thread count; fp64
 * reductions (loss, sum_f64) run in index order. Matrix products go through CBLAS.
 * This header does not record, time or check devices: engine/ops/cpu_kernels.c wraps these
 * into the fb_kernels table. */
#ifndef FB_OPS_H
#define FB_OPS_H
#include <stddef.h>
#include <stdint.h>

#include "../device/kernels.h"
#include "blas.h"

#define FB_R float
#define FB_OPNAME(x) x##_f32
#include "ops_decl.h"
#undef FB_R
#undef FB_OPNAME
#define FB_R double
#define FB_OPNAME(x) x##_f64
#include "ops_decl.h"
#undef FB_R
#undef FB_OPNAME

/* Processors the matrix product's panel split is sized for: the machine's online processors,
 * independent of affinity (taskset, mpirun binding) and of any thread setting. */
int fb_ops_gemm_split_procs(void);

/* Exact sum-of-squares bins of fp32 values (see kernels.h); bins has 2*FB_NORM_BINS words. */
void fb_sumsq_bins_f32(uint64_t *bins, const float *g, size_t n);
/* fp32 <-> bf16, round to nearest even. */
void fb_cast_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
void fb_cast_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
/* Block quantisation (kernels.h's quantize and dequant_sum; x and out fp32 or bf16). */
void fb_quantize_blocks(uint8_t *q, float *scales, const void *x, fb_dtype xt, size_t nseg,
                        size_t seglen, int group, int bits, int rows);
void fb_dequant_sum(void *out, fb_dtype ot, const uint8_t *q, const float *scales, size_t nterm,
                    size_t termlen, size_t seglen, int group, int bits);
/* Measured fp32 FMA peak in FLOP/s of `threads` threads, each running `iters` rounds of an
 * FMA-only loop rated by its own CPU time; the best of `reps` (fma_peak.c). */
double fb_fma_peak(int threads, long iters, int reps);

#endif
