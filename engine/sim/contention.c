/* Compute beside a resident NCCL kernel, and the slowest of N ranks (see contention.h).
 * Sources (../shared/gpu-data/comm-mechanisms.md):
 *  - CTAs: one per runtime channel, which NCCL's connect.c makes twice the tuning graph's
 *    channels: 2 x 12 = 24 in an 8-GPU NVSwitch node (the NVIDIA forum's H100 case: "a
 *    concurrent ncclAllGather holding 24 CTAs"), 2 x 8 = 16 across nodes (NCCL_DEBUG logs of
 *    24 H100 ranks in NVIDIA/nccl#1453; a maintainer in #1649: "the default number of SMs is
 *    16"). Capped at 64 (MAXCHANNELS).
 *  - HBM: with NVLink P2P reads a ring step reads the peer's send buffer and writes this GPU's
 *    output, 2 bytes of HBM per byte of bus traffic (section 1: k = 2-3; we take the 2 the
 *    P2P-read path gives), at the graph's bus bandwidth (nccl_channels x nccl_channel_gbs).
 *  - A GEMM gets the SMs left (the wave model re-quantizes: a one-wave GEMM nearly doubles,
 *    the forum's 80 % -> 47 % MFU; a large one ~ sm / (sm - ctas)); attention kernels, whose
 *    grids are many waves, sm / (sm - ctas); memory-bound kernels the HBM bandwidth left.
 *    arXiv 2507.03114 measured overlapped compute 18.9 % slower on average, 40 % at most, on
 *    4x A100 / H100: an H100 GEMM beside 24 CTAs is 22 % slower here, beside 16 14 %.
 *  - Rank speeds: Sinha et al., "Not All GPUs Are Created Equal" (SC'22, arXiv 2208.11035):
 *    identical GPUs of one cluster differ by 8 % on average (max 22 %) under their power
 *    management. Read as the range of ~1000 normal draws (2 x 3.24 sigma), sigma = 1.2 %
 *    (the profiles' rank_speed_sigma; an ESTIMATE of the reading, not a fit). */
#include "contention.h"

#include <math.h>
#include <string.h>

#include "cost_model.h"
#include "nccl_model.h"

static bool spans_nodes(const fb_hardware *hw, int world) {
  return hw->devices_per_node > 0 && world > hw->devices_per_node;
}

int fb_contention_ctas(const fb_hardware *hw, int world) {
  int ch = spans_nodes(hw, world) ? hw->nccl_ch_net : hw->nccl_ch_node;
  int ctas = 2 * ch;
  return ctas > 64 ? 64 : ctas < 0 ? 0 : ctas;
}

double fb_contention_hbm_bw(const fb_hardware *hw, int world) {
  const bool net = spans_nodes(hw, world);
  double busbw = net ? fb_nccl_net_busbw(hw) : hw->nccl_ch_node * hw->nccl_bw_node;
  return 2.0 * (busbw > 0 ? busbw : 0);
}

void fb_contention_profile(const fb_hardware *hw, int world, fb_hardware *out) {
  *out = *hw;
  const int left = hw->sm_count - fb_contention_ctas(hw, world);
  out->sm_count = left < 1 ? 1 : left;
  /* the tensor and vector peaks are the whole GPU's: the SMs left carry their share */
  const double share = (double)out->sm_count / hw->sm_count;
  out->peak_bf16 *= share;
  out->peak_fp32 *= share;
  out->peak_tf32 *= share;
  out->peak_fp8 *= share;
  const double achieved = hw->mem_bw * hw->mem_eff;
  double f = achieved > 0 ? 1.0 - fb_contention_hbm_bw(hw, world) / achieved : 1.0;
  f = fmax(0.1, fmin(1.0, f)); /* the collective never takes all of it */
  out->mem_bw *= f;
  for (int i = 0; i < out->nkernels; i++) out->kernels[i].bw *= f;
}

double fb_contention_slowdown_on(const fb_hardware *hw, const fb_hardware *cont,
                                 const fb_op_cost *c, int world) {
  const double flat = hw->overlap_slowdown > 1 ? hw->overlap_slowdown : 1.0;
  if (!hw->nccl_contention || hw->sm_count <= 0) return flat;
  if (c->kind == FB_OP_COLL) return 1.0; /* NCCL kernels share their own channels */
  if (c->kind == FB_OP_ATTN && hw->flash_fwd_eff > 0) /* many waves: the SMs' ratio */
    return (double)hw->sm_count / cont->sm_count;
  const double alone = fb_cost_seconds(hw, c, world);
  if (!(alone > 0)) return 1.0;
  return fmax(1.0, fb_cost_seconds(cont, c, world) / alone);
}

double fb_contention_slowdown(const fb_hardware *hw, const fb_op_cost *c, int world) {
  if (!hw->nccl_contention || hw->sm_count <= 0) return fb_contention_slowdown_on(hw, hw, c, world);
  fb_hardware h;
  fb_contention_profile(hw, world, &h);
  return fb_contention_slowdown_on(hw, &h, c, world);
}

/* Standard normal density and distribution. */
static double phi(double x) { return exp(-0.5 * x * x) / sqrt(2.0 * M_PI); }
static double Phi(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

double fb_expected_max_normal(int n) {
  if (n <= 1) return 0;
  /* E[max] = integral of x n phi(x) Phi(x)^(n-1) dx; the mass lies in [-8, 9] for n < 2^31 */
  const double a = -8, b = 9, h = 1.0 / 256;
  double sum = 0;
  for (double x = a; x <= b; x += h) sum += x * n * phi(x) * pow(Phi(x), n - 1);
  return sum * h;
}

double fb_straggler_factor(const fb_hardware *hw, int world) {
  if (!(hw->rank_speed_sigma > 0) || world <= 1) return 1.0;
  return 1.0 + hw->rank_speed_sigma * fb_expected_max_normal(world);
}
