/* What a GPU shares while a collective runs, and what a step of many ranks waits for:
 *  - contention: NCCL's kernel holds one CTA per channel on as many SMs for the whole
 *    collective and moves the collective's bytes through HBM, so a compute kernel beside it runs
 *    on sm_count - CTAs SMs (the GEMM wave model re-quantizes) and on the HBM bandwidth the ring
 *    leaves (gpu-data/comm-mechanisms.md section 1);
 *  - ranks not in lock-step: identical GPUs run at different speeds under their power
 *    management, and every collective of a data-parallel step waits for the slowest rank
 *    (section 6): compute takes 1 + sigma * E[max of N standard normals] times as long.
 * Pure functions of the profile and the world; the sim device (device_sim.c) applies them to
 * the timeline. They do not model the reverse direction (compute delaying the collective). */
#ifndef FB_CONTENTION_H
#define FB_CONTENTION_H
#include "../device/device.h"
#include "hardware.h"

/* CTAs (= SMs) NCCL's kernel holds while a collective of `world` ranks runs: the runtime
 * communicator's channels, twice the tuning graph's (NCCL connect.c). */
int fb_contention_ctas(const fb_hardware *hw, int world);
/* HBM bytes/s the collective's ring moves on one GPU at the graph's bus bandwidth. */
double fb_contention_hbm_bw(const fb_hardware *hw, int world);
/* The profile as a compute kernel beside a resident collective sees it (SMs, HBM rates). */
void fb_contention_profile(const fb_hardware *hw, int world, fb_hardware *out);
/* How many times longer op `c` takes beside a collective (>= 1): its own cost on the contended
 * profile over its cost alone when the profile turns the model on (nccl_contention), else the
 * profile's flat overlap_slowdown. */
double fb_contention_slowdown(const fb_hardware *hw, const fb_op_cost *c, int world);
/* The same with the contended profile already made by fb_contention_profile(hw, world, cont)
 * (the sim device makes it once per device: the world does not change). */
double fb_contention_slowdown_on(const fb_hardware *hw, const fb_hardware *cont,
                                 const fb_op_cost *c, int world);

/* E[max of n independent standard normal draws] (0 for n <= 1), by quadrature. */
double fb_expected_max_normal(int n);
/* The factor a step's compute takes for the slowest of `world` ranks: 1 + rank_speed_sigma *
 * E[max of world draws]; 1 for one rank or a profile without the key. */
double fb_straggler_factor(const fb_hardware *hw, int world);

#endif
