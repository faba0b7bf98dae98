/* What the emulator tests of the attention kernels (test_flash_attention_emu.cc: the sm_80
 * kernels; test_flash_attention_sm90_emu.cc: the sm_90a ones) share: bf16 conversions, a
 * seeded normal generator, the operands of one case (q/k/v fused in one buffer or apart,
 * optionally shifted off 16-byte alignment), the double-precision reference of causal GQA
 * attention (out, lse, dq, dk, dv; D from the kernel's own bf16 out, as the backward uses)
 * and the relative error. Not a test by itself. */
#ifndef FB_TEST_FLASH_ATTENTION_REF_H
#define FB_TEST_FLASH_ATTENTION_REF_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

namespace {

uint16_t to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
double from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

struct rng {
  uint64_t s;
  double uniform() { /* splitmix64 */
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
  }
  double normal() { return sqrt(-2.0 * log(1.0 - uniform())) * cos(6.283185307179586 * uniform()); }
};

struct shape_case {
  int B, T, H, KVH, hd;
  bool fused, misalign; /* q/k/v in one buffer; shift every buffer by 2 bytes (element path) */
  int bchunk;           /* batches per backward launch */
};

/* Views into the operands: q at qb + ((b*T + t)*ldq + h*hd + d), k/v likewise with ldkv. */
struct tensors {
  std::vector<uint16_t> qkv, kbuf, vbuf, dqkv, dkbuf, dvbuf, out, dout;
  uint16_t *q, *k, *v, *dq, *dk, *dv, *o, *dO;
  std::vector<float> lse, Dbuf;
  int ldq, ldkv;
};

void make_tensors(const shape_case &c, tensors &t, rng &r) {
  const int B = c.B, T = c.T, H = c.H, KVH = c.KVH, hd = c.hd, sh = c.misalign ? 1 : 0;
  const size_t rows = (size_t)B * T;
  if (c.fused) {
    t.ldq = t.ldkv = (H + 2 * KVH) * hd;
    t.qkv.assign(rows * t.ldq + sh, 0);
    t.dqkv.assign(rows * t.ldq + sh, 0);
    t.q = t.qkv.data() + sh;
    t.k = t.q + H * hd;
    t.v = t.k + KVH * hd;
    t.dq = t.dqkv.data() + sh;
    t.dk = t.dq + H * hd;
    t.dv = t.dk + KVH * hd;
  } else {
    t.ldq = H * hd;
    t.ldkv = KVH * hd;
    t.qkv.assign(rows * t.ldq + sh, 0);
    t.kbuf.assign(rows * t.ldkv + sh, 0);
    t.vbuf.assign(rows * t.ldkv + sh, 0);
    t.dqkv.assign(rows * t.ldq + sh, 0);
    t.dkbuf.assign(rows * t.ldkv + sh, 0);
    t.dvbuf.assign(rows * t.ldkv + sh, 0);
    t.q = t.qkv.data() + sh, t.k = t.kbuf.data() + sh, t.v = t.vbuf.data() + sh;
    t.dq = t.dqkv.data() + sh, t.dk = t.dkbuf.data() + sh, t.dv = t.dvbuf.data() + sh;
  }
  t.out.assign(rows * H * hd + sh, 0);
  t.dout.assign(rows * H * hd + sh, 0);
  t.o = t.out.data() + sh;
  t.dO = t.dout.data() + sh;
  for (size_t i = 0; i < rows; i++)
    for (int d = 0; d < H * hd; d++) {
      t.q[i * t.ldq + d] = to_bf16((float)r.normal());
      t.dO[i * H * hd + d] = to_bf16((float)r.normal());
    }
  for (size_t i = 0; i < rows; i++)
    for (int d = 0; d < KVH * hd; d++) {
      t.k[i * t.ldkv + d] = to_bf16((float)r.normal());
      t.v[i * t.ldkv + d] = to_bf16((float)r.normal());
    }
  t.lse.assign((size_t)B * H * T, 0.0f);
  t.Dbuf.assign((size_t)c.bchunk * H * T, 0.0f);
}

/* Double-precision reference; D uses the kernel's own bf16 out, as the backward does. */
struct reference {
  std::vector<double> out, lse, dq, dk, dv;
};
void compute_reference(const shape_case &c, const tensors &t, reference &ref) {
  const int B = c.B, T = c.T, H = c.H, KVH = c.KVH, hd = c.hd, rep = H / KVH;
  const double sc = 1.0 / sqrt((double)hd);
  ref.out.assign((size_t)B * T * H * hd, 0.0);
  ref.lse.assign((size_t)B * H * T, 0.0);
  ref.dq.assign((size_t)B * T * H * hd, 0.0);
  ref.dk.assign((size_t)B * T * KVH * hd, 0.0);
  ref.dv.assign((size_t)B * T * KVH * hd, 0.0);
  std::vector<double> p((size_t)T), dp((size_t)T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int g = h / rep;
      for (int i = 0; i < T; i++) {
        const uint16_t *qi = t.q + ((size_t)b * T + i) * t.ldq + h * hd;
        double mx = -INFINITY, sum = 0.0, D = 0.0;
        for (int j = 0; j <= i; j++) {
          const uint16_t *kj = t.k + ((size_t)b * T + j) * t.ldkv + g * hd;
          double s = 0.0;
          for (int d = 0; d < hd; d++) s += from_bf16(qi[d]) * from_bf16(kj[d]);
          p[j] = s * sc;
          mx = fmax(mx, p[j]);
        }
        for (int j = 0; j <= i; j++) sum += exp(p[j] - mx);
        ref.lse[((size_t)b * H + h) * T + i] = mx + log(sum);
        const size_t oo = ((size_t)b * T + i) * H * hd + h * hd;
        for (int j = 0; j <= i; j++) {
          p[j] = exp(p[j] - mx) / sum;
          const uint16_t *vj = t.v + ((size_t)b * T + j) * t.ldkv + g * hd;
          for (int d = 0; d < hd; d++) ref.out[oo + d] += p[j] * from_bf16(vj[d]);
        }
        for (int d = 0; d < hd; d++) D += from_bf16(t.dO[oo + d]) * from_bf16(t.o[oo + d]);
        for (int j = 0; j <= i; j++) {
          const size_t ko = ((size_t)b * T + j) * KVH * hd + g * hd;
          const uint16_t *vj = t.v + ((size_t)b * T + j) * t.ldkv + g * hd;
          const uint16_t *kj = t.k + ((size_t)b * T + j) * t.ldkv + g * hd;
          double dpij = 0.0;
          for (int d = 0; d < hd; d++) dpij += from_bf16(t.dO[oo + d]) * from_bf16(vj[d]);
          const double ds = p[j] * (dpij - D) * sc;
          for (int d = 0; d < hd; d++) {
            ref.dv[ko + d] += p[j] * from_bf16(t.dO[oo + d]);
            ref.dq[oo + d] += ds * from_bf16(kj[d]);
            ref.dk[ko + d] += ds * from_bf16(qi[d]);
          }
        }
      }
    }
}

/* max |got - want| over max |want|, elements addressed as (row, col) with strides. */
double rel_err(const uint16_t *got, size_t ldg, const std::vector<double> &want, size_t ldw,
               size_t rows, int cols) {
  double e = 0.0, m = 1e-30;
  for (size_t r = 0; r < rows; r++)
    for (int d = 0; d < cols; d++) {
      const double w = want[r * ldw + d], x = from_bf16(got[r * ldg + d]);
      if (!(fabs(x - w) <= e)) e = isnan(x) ? INFINITY : fabs(x - w);
      m = fmax(m, fabs(w));
    }
  return e / m;
}

} /* namespace */
#endif
