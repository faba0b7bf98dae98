/* The checks both attention emulator tests make on one case, once the kernels have run: the
 * kernel arguments built from the case's tensors, the forward (out, lse) and backward (dq,
 * dk, dv) against the double-precision reference with their limits, and the same bits under
 * other block orders and schedules. Include it after the kernel header (fa::args) and
 * flash_attention_ref.h. It launches nothing itself: each test passes its own launches. */
#ifndef FB_TEST_FLASH_ATTENTION_CHECKS_H
#define FB_TEST_FLASH_ATTENTION_CHECKS_H
#include <math.h>
#include <stdio.h>

#include <vector>

namespace {

int failures = 0;

void check(bool ok, const char *what, const shape_case &c, double v, double lim) {
  printf("  %-4s %-36s %.3g (limit %.3g)\n", ok ? "ok" : "FAIL", what, v, lim);
  if (!ok) {
    failures++;
    fprintf(stderr, "FAIL: B%d T%d H%d KVH%d hd%d%s%s: %s = %g > %g\n", c.B, c.T, c.H, c.KVH,
            c.hd, c.fused ? " fused" : "", c.misalign ? " unaligned" : "", what, v, lim);
  }
}

/* The kernels' arguments for the case's tensors (a.vec as fa::can_vec decides it). */
fa::args kernel_args(const shape_case &c, tensors &t) {
  fa::args a{};
  a.q = t.q, a.k = t.k, a.v = t.v, a.out = t.o, a.dout = t.dO;
  a.o = t.o, a.dq = t.dq, a.dk = t.dk, a.dv = t.dv, a.lse = t.lse.data(), a.Dbuf = t.Dbuf.data();
  a.B = c.B, a.T = c.T, a.H = c.H, a.KVH = c.KVH, a.hd = c.hd, a.ldq = t.ldq, a.ldkv = t.ldkv;
  a.scale = (float)(1.0 / sqrt((double)c.hd));
  a.scale2 = a.scale * fa::LOG2E;
  a.vec = fa::can_vec(a);
  return a;
}

/* out and lse of the forward just run, against the reference. */
void check_forward(const shape_case &c, const tensors &t, const reference &ref) {
  const size_t rows = (size_t)c.B * c.T;
  check(rel_err(t.o, (size_t)c.H * c.hd, ref.out, (size_t)c.H * c.hd, rows, c.H * c.hd) <= 1e-2,
        "out: max err / max |out|", c,
        rel_err(t.o, (size_t)c.H * c.hd, ref.out, (size_t)c.H * c.hd, rows, c.H * c.hd), 1e-2);
  double le = 0.0;
  for (size_t i = 0; i < ref.lse.size(); i++) {
    const double e = fabs(t.lse[i] - ref.lse[i]) / (1.0 + fabs(ref.lse[i]));
    le = e <= le ? le : (isnan(e) ? INFINITY : e);
  }
  check(le <= 2e-6, "lse: max err / (1 + |lse|)", c, le, 2e-6);
}

/* dq, dk and dv of the backward just run, against the reference. */
void check_backward(const shape_case &c, const tensors &t, const reference &ref) {
  const size_t rows = (size_t)c.B * c.T;
  const double eq = rel_err(t.dq, t.ldq, ref.dq, (size_t)c.H * c.hd, rows, c.H * c.hd);
  const double ek = rel_err(t.dk, t.ldkv, ref.dk, (size_t)c.KVH * c.hd, rows, c.KVH * c.hd);
  const double ev = rel_err(t.dv, t.ldkv, ref.dv, (size_t)c.KVH * c.hd, rows, c.KVH * c.hd);
  check(eq <= 2e-2, "dq: max err / max |dq|", c, eq, 2e-2);
  check(ek <= 2e-2, "dk: max err / max |dk|", c, ek, 2e-2);
  check(ev <= 2e-2, "dv: max err / max |dv|", c, ev, 2e-2);
}

/* Every output buffer of a forward and backward, to compare runs bit for bit. */
struct outputs {
  std::vector<uint16_t> out, dqkv, dk, dv;
  std::vector<float> lse;
};
outputs outputs_of(const tensors &t) { return outputs{t.out, t.dqkv, t.dkbuf, t.dvbuf, t.lse}; }

/* rerun(order) runs the forward and backward again with block order 1 (reversed) or 2
 * (shuffled): the outputs must be b0's bits. */
template <class Rerun>
void check_block_orders(const shape_case &c, const tensors &t, const outputs &b0, Rerun rerun) {
  for (int order = 1; order <= 2; order++) {
    rerun(order);
    const bool same = t.out == b0.out && t.lse == b0.lse && t.dqkv == b0.dqkv &&
                      t.dkbuf == b0.dk && t.dvbuf == b0.dv;
    check(same, order == 1 ? "same bits, blocks reversed" : "same bits, blocks shuffled", c,
          same ? 0.0 : 1.0, 0.0);
  }
}

} /* namespace */

#endif
