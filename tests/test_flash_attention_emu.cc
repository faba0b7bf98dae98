/* The tensor-core attention kernels (engine/backends/cuda/flash_attention.cuh), run on the CPU by the
 * CUDA emulator (tests/cuda_emu), against a double-precision reference of causal GQA
 * attention on the same bf16 inputs: out, lse, dq, dk, dv, for head dims 64 and 128 and ones
 * padded to them (36, 40, 96), GQA groups of 1, 2 and 4 heads, sequence lengths with and
 * without tails (1, 33, 64, 65, 130, 200), q/k/v inside one fused qkv buffer or apart, the
 * 16-byte cp.async path and the element path, and the backward split over batch chunks.
 * Every kernel is run twice more with other block orders and fiber schedules: the results
 * must be the same bits (no dependence on scheduling, as the strategies' bitwise equality
 * needs). What it cannot check: the GPU's own fragment layouts (the emulator implements the
 * PTX ISA's), timing, or races the emulator's schedules do not expose. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_emu/cuda_emu.h"
#include "engine/backends/cuda/flash_attention.cuh"
#include "flash_attention_ref.h"
#include "flash_attention_checks.h"

namespace {

template <int HD, int W>
void launch_fwd(const fa::args &a, emu_launch_opts o) {
  emu_launch(dim3(a.B * a.H, fa::tiles(a.T, 16 * W)), dim3(32 * W),
             fa::fwd_smem_bytes<HD, W>(), [&] { fa::flash_attn_fwd_k<HD, W>(a); }, o);
}
template <int HD, int W>
void launch_bwd(fa::args a, int bchunk, emu_launch_opts o) {
  for (int b0 = 0; b0 < a.B; b0 += bchunk) {
    const int nb = a.B - b0 < bchunk ? a.B - b0 : bchunk;
    a.b0 = b0;
    emu_launch(dim3(nb * a.H, fa::tiles(a.T, 16 * W)), dim3(32 * W),
               fa::dq_smem_bytes<HD, W>(), [&] { fa::flash_attn_bwd_dq_k<HD, W>(a); }, o);
    if (emu_last_counts().mma == 0) failures++, fprintf(stderr, "FAIL: dq kernel ran no mma\n");
    emu_launch(dim3(nb * a.KVH, fa::tiles(a.T, 16 * W)), dim3(32 * W),
               fa::dkv_smem_bytes<HD, W>(), [&] { fa::flash_attn_bwd_dkv_k<HD, W>(a); }, o);
  }
}

template <int HD>
void run_case(const shape_case &c, uint64_t seed) {
  constexpr int W = 4;
  printf("B%d T%d H%d KVH%d hd%d (tile dim %d)%s%s, backward in chunks of %d\n", c.B, c.T,
         c.H, c.KVH, c.hd, HD, c.fused ? ", fused qkv" : "", c.misalign ? ", unaligned" : "",
         c.bchunk);
  rng r{seed};
  tensors t;
  make_tensors(c, t, r);
  fa::args a = kernel_args(c, t);
  if (a.vec != (!c.misalign && c.hd % 8 == 0)) {
    failures++;
    fprintf(stderr, "FAIL: the 16-byte path is %s for hd %d%s\n", a.vec ? "on" : "off", c.hd,
            c.misalign ? ", unaligned buffers" : "");
  }
  launch_fwd<HD, W>(a, emu_launch_opts{(unsigned)seed, 0});
  const emu_counts fc = emu_last_counts();
  check(fc.mma > 0 && fc.ldsm > 0, "forward ran on mma/ldmatrix", c, (double)fc.mma, 1);
  reference ref;
  compute_reference(c, t, ref);
  check_forward(c, t, ref);
  launch_bwd<HD, W>(a, c.bchunk, emu_launch_opts{(unsigned)seed + 1, 0});
  check_backward(c, t, ref);

  /* the same bits for other block orders and schedules */
  const outputs b0 = outputs_of(t);
  check_block_orders(c, t, b0, [&](int order) {
    launch_fwd<HD, W>(a, emu_launch_opts{(unsigned)(seed * 7 + order), order});
    launch_bwd<HD, W>(a, c.bchunk, emu_launch_opts{(unsigned)(seed * 13 + order), order});
  });
}

} /* namespace */

int main(void) {
  const shape_case cases[] = {
      {1, 1, 2, 1, 64, false, false, 1},   {2, 33, 4, 2, 64, true, false, 1},
      {1, 64, 2, 2, 64, false, false, 1},  {2, 65, 4, 1, 64, true, false, 2},
      {1, 130, 4, 2, 128, true, false, 1}, {1, 200, 2, 1, 96, false, false, 1},
      {2, 70, 4, 4, 40, true, false, 1},   {1, 50, 2, 1, 36, false, false, 1},
      {1, 129, 4, 2, 128, false, true, 1}, {1, 66, 2, 2, 64, true, true, 1},
  };
  uint64_t seed = 1;
  for (const shape_case &c : cases) {
    if (c.hd <= 64) run_case<64>(c, seed++);
    else run_case<128>(c, seed++);
  }
  if (failures) {
    fprintf(stderr, "test_flash_attention_emu: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_flash_attention_emu: all checks passed\n");
  return 0;
}
