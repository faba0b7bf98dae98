/* zeropp's cuda quantisation kernels (engine/backends/cuda/quant_blocks.cuh), run on the CPU by
 * the CUDA emulator (tests/cuda_emu): quantize_blocks_k must write the bytes and scales of a
 * reference written here from the definition (per block: scale = absmax / qmax, q =
 * fb_quant_one; int4 two a byte, low nibble first; segment a*cols + b stored at b*rows + a),
 * for int8 and int4, fp32 and bf16 input, partial last blocks, a segment shorter than a block,
 * several block schedules; dequant_sum_k must give the reference's in-order fp32 sum of the
 * dequantised terms, in fp32 and bf16, bit for bit. What it cannot check: GPU timing. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "cuda_emu/cuda_emu.h"
#include "engine/backends/cuda/quant_blocks.cuh"
#include "cuda_emu/emu_test.h"

namespace {

int failures = 0;
using emu_test::from_e;
using emu_test::rnd;
using emu_test::to_e;

template <typename E>
void quant_case(size_t nseg, size_t seglen, int group, int bits, int rows, unsigned seed) {
  const size_t n = nseg * seglen, bps = (seglen + group - 1) / group, cols = nseg / rows;
  uint64_t s = seed;
  std::vector<E> x(n);
  for (size_t i = 0; i < n; i++) x[i] = to_e<E>(rnd(s) * (float)(1 + i % 5));
  std::vector<uint8_t> rq(n, 0), q(n, 0xAA);
  std::vector<float> rs(nseg * bps), sc(nseg * bps, -1.0f);
  for (size_t sg = 0; sg < nseg; sg++) /* the reference, from the definition */
    for (size_t b = 0; b < bps; b++) {
      const size_t off = b * group, len = off + group < seglen ? group : seglen - off;
      const size_t to = sg % cols * rows + sg / cols, i0 = sg * seglen + off, o = to * seglen + off;
      float m = 0;
      for (size_t j = 0; j < len; j++) m = fmaxf(m, fabsf((float)from_e(x[i0 + j])));
      const float scale = fb_quant_scale(m, bits);
      rs[to * bps + b] = scale;
      for (size_t j = 0; j < len; j++) {
        const int v = fb_quant_one((float)from_e(x[i0 + j]), scale, bits);
        if (bits == 8) rq[o + j] = (uint8_t)(int8_t)v;
        else rq[(o + j) / 2] |= (uint8_t)((v & 15) << (4 * ((o + j) & 1)));
      }
    }
  const E *xp = x.data();
  uint8_t *qp = q.data();
  float *sp = sc.data();
  emu_launch(dim3((unsigned)(nseg * bps)), dim3(QB_THREADS), 0,
             [&] { quantize_blocks_k<E>(qp, sp, xp, nseg, seglen, group, bits, rows, bps); },
             emu_launch_opts{seed, (int)(seed % 3)});
  const size_t qb = n * bits / 8;
  const bool ok_q =
      !memcmp(q.data(), rq.data(), qb) && !memcmp(sc.data(), rs.data(), rs.size() * 4);
  /* dequant_sum over 2 terms (when the segments split evenly), fp32 and bf16 out */
  const size_t nterm = nseg % 2 == 0 ? 2 : 1, tl = n / nterm;
  std::vector<float> ref(tl), out(tl);
  std::vector<uint16_t> outh(tl);
  for (size_t ii = 0; ii < tl; ii++) {
    float acc = 0;
    for (size_t t = 0; t < nterm; t++) {
      const size_t i = t * tl + ii, sg = i / seglen;
      const int v = bits == 8 ? (int)(int8_t)rq[i] : fb_q4_unpack(rq[i / 2], (int)(i & 1));
      const float d = (float)v * rs[sg * bps + (i - sg * seglen) / group];
      acc = t == 0 ? d : acc + d;
    }
    ref[ii] = acc;
  }
  float *op = out.data();
  uint16_t *oh = outh.data();
  emu_launch(dim3(7), dim3(64), 0,
             [&] { dequant_sum_k<float>(op, qp, sp, nterm, tl, seglen, group, bits, bps); },
             emu_launch_opts{seed + 1, 1});
  emu_launch(dim3(3), dim3(128), 0,
             [&] { dequant_sum_k<bf16>(oh, qp, sp, nterm, tl, seglen, group, bits, bps); },
             emu_launch_opts{seed + 2, 2});
  size_t bad_f = 0, bad_h = 0;
  for (size_t i = 0; i < tl; i++) {
    bad_f += memcmp(&out[i], &ref[i], 4) != 0;
    bad_h += outh[i] != fb_f32_to_bf16(ref[i]);
  }
  const bool ok = ok_q && !bad_f && !bad_h;
  failures += !ok;
  printf("%s int%d %s %zu x %zu group %d rows %d: quantize %s, dequant_sum fp32 %zu bf16 %zu "
         "off\n", ok ? "ok  " : "FAIL", bits, sizeof(E) == 2 ? "bf16" : "fp32", nseg, seglen,
         group, rows, ok_q ? "exact" : "DIFFERS", bad_f, bad_h);
}

} /* namespace */

int main() {
  quant_case<float>(2, 5000, 4096, 8, 1, 11);  /* a partial last block */
  quant_case<bf16>(3, 1000, 4096, 8, 1, 12);   /* a segment shorter than a block */
  quant_case<float>(6, 4100, 2048, 4, 3, 13);  /* int4, reordered 3 x 2, short last block */
  quant_case<bf16>(4, 2050, 2048, 4, 2, 14);   /* int4 from bf16, a last block of 2 */
  quant_case<float>(8, 300, 128, 4, 4, 15);    /* many small blocks */
  printf("test_quant_emu: %d failed\n", failures);
  return failures ? 1 : 0;
}
