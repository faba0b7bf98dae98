/* The sm_90a warpgroup-MMA attention kernels (engine/backends/cuda/flash_attention_sm90.cuh),
 * run on the CPU by the CUDA emulator (tests/cuda_emu: wgmma with shared-memory matrix
 * descriptors in the 128-byte swizzle, per the PTX ISA), against the double-precision
 * reference of causal GQA attention (flash_attention_ref.h): out, lse, dq, dk, dv for head
 * dims 64 and 128 and ones padded to them (40, 96), GQA groups of 1, 2 and 4 heads, sequence
 * lengths inside one 128-row block and across several (1, 33, 64, 65, 130, 200, 257), q/k/v
 * fused or apart, the backward in batch chunks; the TMA-fed, warp-specialized kernels must
 * give the cp.async kernels' bits (three runs each, TMA copies landing at other times). Every kernel is run twice more with other
 * block orders and fiber schedules: the results must be the same bits (the strategies'
 * bitwise equality needs it). What it cannot check, and what does instead: the GPU's own
 * reading of the descriptors and fragment layouts (the emulator implements the PTX ISA's
 * text; a GPU self-test row and the SASS check of ../shared/acceptance/Q-gpu-ahead, HGMMA
 * in every sm_90a attention kernel, no local memory); the async-proxy fence
 * (fence.proxy.async is a no-op here); setmaxnreg (a no-op here; ptxas's register counts
 * and the absence of LDL/STL in the SASS check it); the host's cuTensorMapEncodeTiled call
 * (kernels_attention_sm90.cu; tmap() below mirrors its dimensions, strides and boxes, the
 * GPU self-test checks the real one); whether TMA counts a box's out-of-bounds part in its
 * transaction bytes (the emulator does, as the kernels assume); timing; races the
 * schedules do not expose. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "cuda_emu/cuda_emu.h"
#include "engine/backends/cuda/flash_attention_sm90.cuh"
#include "flash_attention_ref.h"
#include "flash_attention_checks.h"

namespace {

template <int HD>
void launch_fwd(const fa::args &a, emu_launch_opts o) {
  emu_launch(dim3(a.B * a.H, fa::tiles(a.T, fa3::BR)), dim3(fa3::NT), fa3::fwd_smem_bytes<HD>(),
             [&] { fa3::flash_attn_fwd_sm90_k<HD>(a); }, o);
}
/* The TMA-fed forward: tensor maps as kernels_attention_sm90.cu makes them (4-D: hd, heads,
 * T, B; boxes of 64 columns and a tile of rows). */
fb_tmap tmap(const uint16_t *base, const fa::args &a, int heads, int ld, int rows) {
  fb_tmap m{};
  m.base = base;
  m.dim[0] = (uint64_t)a.hd, m.dim[1] = (uint64_t)heads, m.dim[2] = (uint64_t)a.T;
  m.dim[3] = (uint64_t)a.B;
  m.stride[0] = 2, m.stride[1] = 2 * (uint64_t)a.hd, m.stride[2] = 2 * (uint64_t)ld;
  m.stride[3] = 2 * (uint64_t)ld * (uint64_t)a.T;
  m.box[0] = 64, m.box[1] = 1, m.box[2] = (uint32_t)rows, m.box[3] = 1;
  m.swizzle128 = 1;
  return m;
}
template <int HD>
void launch_fwd_tma(const fa::args &a, emu_launch_opts o) {
  fa3::tmaps tm;
  tm.q = tmap(a.q, a, a.H, a.ldq, fa3::BR);
  tm.k = tmap(a.k, a, a.KVH, a.ldkv, fa3::BC);
  tm.v = tmap(a.v, a, a.KVH, a.ldkv, fa3::BC);
  emu_launch(dim3(a.B * a.H, fa::tiles(a.T, fa3::BR)), dim3(fa3::NT + 128),
             fa3::fwd_tma_smem_bytes<HD>(), [&] { fa3::flash_attn_fwd_tma_sm90_k<HD>(a, tm); }, o);
}

template <int HD>
void launch_bwd_tma(fa::args a, int bchunk, emu_launch_opts o) {
  fa3::bwd_tmaps tm;
  tm.q = tmap(a.q, a, a.H, a.ldq, 64);
  tm.k = tmap(a.k, a, a.KVH, a.ldkv, 64);
  tm.v = tmap(a.v, a, a.KVH, a.ldkv, 64);
  tm.dout = tmap(a.dout, a, a.H, a.H * a.hd, 64);
  for (int b0 = 0; b0 < a.B; b0 += bchunk) {
    const int nb = a.B - b0 < bchunk ? a.B - b0 : bchunk;
    a.b0 = b0;
    emu_launch(dim3(nb * a.H, fa::tiles(a.T, fa3::BR)), dim3(fa3::NT + 128),
               fa3::dq_tma_smem_bytes<HD>(), [&] { fa3::flash_attn_bwd_dq_tma_sm90_k<HD>(a, tm); }, o);
    if (emu_last_counts().tma == 0) failures++, fprintf(stderr, "FAIL: TMA dq kernel ran no TMA\n");
    emu_launch(dim3(nb * a.KVH, fa::tiles(a.T, fa3::BR)), dim3(fa3::NT + 128),
               fa3::dkv_tma_smem_bytes<HD>(), [&] { fa3::flash_attn_bwd_dkv_tma_sm90_k<HD>(a, tm); }, o);
    if (emu_last_counts().tma == 0) failures++, fprintf(stderr, "FAIL: TMA dkv kernel ran no TMA\n");
  }
}

template <int HD>
void launch_bwd(fa::args a, int bchunk, emu_launch_opts o) {
  for (int b0 = 0; b0 < a.B; b0 += bchunk) {
    const int nb = a.B - b0 < bchunk ? a.B - b0 : bchunk;
    a.b0 = b0;
    emu_launch(dim3(nb * a.H, fa::tiles(a.T, fa3::BR)), dim3(fa3::NT), fa3::dq_smem_bytes<HD>(),
               [&] { fa3::flash_attn_bwd_dq_sm90_k<HD>(a); }, o);
    if (emu_last_counts().wgmma == 0) failures++, fprintf(stderr, "FAIL: dq kernel ran no wgmma\n");
    emu_launch(dim3(nb * a.KVH, fa::tiles(a.T, fa3::BR)), dim3(fa3::NT),
               fa3::dkv_smem_bytes<HD>(), [&] { fa3::flash_attn_bwd_dkv_sm90_k<HD>(a); }, o);
    if (emu_last_counts().wgmma == 0) failures++, fprintf(stderr, "FAIL: dkv kernel ran no wgmma\n");
  }
}

template <int HD>
void run_case(const shape_case &c, uint64_t seed) {
  printf("B%d T%d H%d KVH%d hd%d (tile dim %d)%s%s, backward in chunks of %d\n", c.B, c.T,
         c.H, c.KVH, c.hd, HD, c.fused ? ", fused qkv" : "", c.misalign ? ", unaligned" : "",
         c.bchunk);
  rng r{seed};
  tensors t;
  make_tensors(c, t, r);
  fa::args a = kernel_args(c, t);
  if (!a.vec) {
    failures++;
    fprintf(stderr, "FAIL: case without the 16-byte path (the sm_90a kernels need it)\n");
    return;
  }
  launch_fwd<HD>(a, emu_launch_opts{(unsigned)seed, 0});
  const emu_counts fc = emu_last_counts();
  check(fc.wgmma > 0 && fc.mma == 0, "forward ran on wgmma", c, (double)fc.wgmma, 1);
  reference ref;
  compute_reference(c, t, ref);
  check_forward(c, t, ref);
  launch_bwd<HD>(a, c.bchunk, emu_launch_opts{(unsigned)seed + 1, 0});
  check_backward(c, t, ref);

  /* the same bits for other block orders and schedules */
  const outputs b0 = outputs_of(t);
  check_block_orders(c, t, b0, [&](int order) {
    launch_fwd<HD>(a, emu_launch_opts{(unsigned)(seed * 7 + order), order});
    launch_bwd<HD>(a, c.bchunk, emu_launch_opts{(unsigned)(seed * 13 + order), order});
  });
  /* the TMA-fed forward: the same products in the same order, so the same bits */
  for (int run = 0; run < 3; run++) { /* copies land at other times each run */
    std::fill(t.out.begin(), t.out.end(), (uint16_t)0);
    launch_fwd_tma<HD>(a, emu_launch_opts{(unsigned)(seed * 17 + run), run});
    const emu_counts tc = emu_last_counts();
    check(tc.tma > 0 && tc.wgmma > 0 && tc.cp_async == 0, "TMA forward ran on TMA and wgmma",
          c, (double)tc.tma, 1);
    const bool same = t.out == b0.out && t.lse == b0.lse;
    check(same, "TMA forward: the cp.async forward's bits", c, same ? 0.0 : 1.0, 0.0);
    std::fill(t.dqkv.begin(), t.dqkv.end(), (uint16_t)0);
    std::fill(t.dkbuf.begin(), t.dkbuf.end(), (uint16_t)0);
    std::fill(t.dvbuf.begin(), t.dvbuf.end(), (uint16_t)0);
    launch_bwd_tma<HD>(a, c.bchunk, emu_launch_opts{(unsigned)(seed * 19 + run), run});
    const bool sameb = t.dqkv == b0.dqkv && t.dkbuf == b0.dk && t.dvbuf == b0.dv;
    check(sameb, "TMA backward: the cp.async backward's bits", c, sameb ? 0.0 : 1.0, 0.0);
  }
}

} /* namespace */

int main(void) {
  const shape_case cases[] = {
      {1, 1, 2, 1, 64, false, false, 1},    {2, 33, 4, 2, 64, true, false, 1},
      {1, 64, 2, 2, 64, false, false, 1},   {2, 65, 4, 1, 64, true, false, 2},
      {1, 130, 4, 2, 128, true, false, 1},  {1, 200, 2, 1, 96, false, false, 1},
      {2, 70, 4, 4, 40, true, false, 1},    {1, 257, 2, 2, 64, false, false, 1},
      {1, 257, 2, 1, 128, false, false, 1},
  };
  uint64_t seed = 1;
  for (const shape_case &c : cases) {
    if (c.hd <= 64) run_case<64>(c, seed++);
    else run_case<128>(c, seed++);
  }
  if (failures) {
    fprintf(stderr, "test_flash_attention_sm90_emu: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_flash_attention_sm90_emu: all checks passed\n");
  return 0;
}
