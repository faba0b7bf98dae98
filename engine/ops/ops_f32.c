/* The CPU ops in single precision (what the cpu device computes with): instantiates
 * ops_impl.h for float with sgemm. Does not hold the math itself; see ops_impl.h. */
/* Elementwise loops with selects, float<->int conversions and sqrt vectorise only when the
 * compiler may assume FP exceptions do not trap and sqrt need not set errno; values are the
 * same either way. */
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#include <assert.h>
#include <math.h>
#include <omp.h>

#include "blas.h"
#include "elementwise.h"
#include "ops.h"

#define REAL float
#define OPN(x) x##_f32
#define LOC(x) x##_f32_
#define R_EXP fb_exp_f
#define R_LOG logf
#define R_SQRT sqrtf
#define R_GEMM cblas_sgemm
#define R_GELU fb_gelu_f
#define R_GELU_GRAD fb_gelu_grad_f
#define R_SWIGLU fb_swiglu_f
#define R_SWIGLU_GRAD fb_swiglu_grad_f
#define R_ADAMW fb_adamw_update_f
#define R_SGD fb_sgd_update_f
#include "ops_impl.h"
