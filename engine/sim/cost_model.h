/* The cost model: how long one op (a kernel or a collective) takes on a hardware profile.
 * Pure functions of (profile, op, world): no state, no clocks. The sim device turns these
 * durations into a timeline; docs/simulator.md states every formula. */
#ifndef FB_COST_MODEL_H
#define FB_COST_MODEL_H
#include <stdbool.h>

#include "../device/device.h"
#include "hardware.h"

/* Seconds op `c` takes on one device of `hw` when `world` ranks run (world matters for
 * collectives whose c->world is 0, and for shared-host profiles). Collectives of world 1 cost
 * 0. Never negative. */
double fb_cost_seconds(const fb_hardware *hw, const fb_op_cost *c, int world);

/* The parts, exposed for tests, calibration and docs. */
/* GEMM efficiency for a product of cube-root size s = cbrt(m*n*k*batch): max * s / (s + half). */
double fb_cost_gemm_efficiency(const fb_hardware *hw, double size);
/* A fused MLP op (matmul_gelu_fwd, matmul_bwd_gelu) as the two ops a framework without the
 * epilogue runs: the product (`gemm`, as matmul_fwd / matmul_bwd record it) and the GELU pass
 * (`pass`, as gelu_fwd / gelu_bwd record it). False for any other op. */
bool fb_cost_fused_gelu_parts(const fb_op_cost *c, fb_op_cost *gemm, fb_op_cost *pass);
/* GPU GEMM efficiency (fraction of the dtype's peak) of `batch` m x n x k products on a profile
 * with sm_count > 0: tile and wave quantization, main-loop depth, split-K, alignment. */
double fb_cost_gemm_shape_efficiency(const fb_hardware *hw, double m, double n, double k,
                                     double batch, fb_dtype t);
/* One GEMM call of `batch` m x n x k products as a library runs it alone (a microbenchmark
 * row, a calibration point): the shape model on GPU profiles, the size curve otherwise.
 * `fp8`: FP8 operands on the profile's FP8 peak (peak_tflops_fp8, fp8_gemm_ratio). */
double fb_cost_gemm_seconds(const fb_hardware *hw, fb_dtype t, double m, double n, double k,
                            double batch, bool fp8);
/* A collective of `bytes` payload (all-gather / reduce-scatter: the full gathered buffer;
 * all-reduce, broadcast, reduce: the buffer) over `world` ranks. World 1 is a device copy
 * (broadcast and barrier: 0); on a shared host the shared-memory formula at W = 1 with one
 * latency (the comm thread's hand-off). */
double fb_cost_collective(const fb_hardware *hw, fb_coll coll, double bytes, int world);
/* Bytes all ranks together read and write in a shared-memory collective (the local
 * communicator's algorithm; `collectives: shared_memory`) of `bytes` payload over `world`
 * ranks. */
double fb_cost_shared_memory_bytes(fb_coll coll, double bytes, int world);
/* Group barriers (latencies) a shared-memory collective meets: barrier 1, all-reduce 3,
 * the others 2. */
double fb_cost_shared_memory_barriers(fb_coll coll);

#endif
