/* The CPU ops in double precision: the reference the gradient checks and the f32/f64
 * agreement tests use. Instantiates ops_impl.h for double with dgemm and libm. */
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

#define REAL double
#define OPN(x) x##_f64
#define LOC(x) x##_f64_
#define R_EXP exp
#define R_LOG log
#define R_SQRT sqrt
#define R_GEMM cblas_dgemm
#define R_GELU fb_gelu_d
#define R_GELU_GRAD fb_gelu_grad_d
#define R_SWIGLU fb_swiglu_d
#define R_SWIGLU_GRAD fb_swiglu_grad_d
#define R_ADAMW fb_adamw_update_d
#define R_SGD fb_sgd_update_d
#include "ops_impl.h"
