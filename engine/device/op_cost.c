/* What an op costs, as the device interface describes it (device.h): the names of the
 * collectives, a matrix product's efficiency size, and a collective's logical and wire bytes
 * (and their intra-/inter-node split). Pure functions of fb_op_cost; the recorder, the cost
 * model, the communicators and calibration share them. It keeps no state and calls nothing. */
#include <math.h>

#include "device.h"

const char *fb_coll_name(fb_coll c) {
  static const char *const n[FB_NCOLL] = {
      [FB_COLL_ALL_GATHER] = "all_gather", [FB_COLL_REDUCE_SCATTER] = "reduce_scatter",
      [FB_COLL_ALL_REDUCE] = "all_reduce", [FB_COLL_BROADCAST] = "broadcast",
      [FB_COLL_REDUCE] = "reduce",         [FB_COLL_BARRIER] = "barrier",
      [FB_COLL_ALL_TO_ALL] = "all_to_all"};
  return (c >= 0 && c < FB_NCOLL) ? n[c] : "?";
}

double fb_op_gemm_size(const fb_op_cost *c) {
  if (c->m > 0 && c->n > 0 && c->k > 0)
    return cbrt((double)c->m * (double)c->n * (double)c->k * (double)(c->batch > 0 ? c->batch : 1));
  return cbrt(c->flops / 2.0);
}

double fb_coll_bytes(fb_coll c, int64_t count, fb_dtype t, int world) {
  const double e = (double)count * (double)fb_dtype_size(t);
  switch (c) {
  case FB_COLL_ALL_GATHER:
  case FB_COLL_ALL_TO_ALL:
  case FB_COLL_REDUCE_SCATTER: return e * world;
  case FB_COLL_ALL_REDUCE: return 2.0 * e;
  case FB_COLL_BROADCAST:
  case FB_COLL_REDUCE: return e;
  case FB_COLL_BARRIER:
  case FB_NCOLL: break;
  }
  return 0.0;
}

/* Bytes one rank puts on the wire, assuming ring algorithms (NCCL's default and the bus
 * bandwidth convention of nccl-tests):
 *  - all-gather / reduce-scatter: W-1 steps of one shard each = (W-1)/W of the full buffer
 *    (count*W*size), i.e. (W-1)*count*size;
 *  - all-reduce: a reduce-scatter then an all-gather of the whole tensor: 2(W-1)/W*count*size;
 *  - broadcast / reduce: a pipelined ring (chain) where every rank but one forwards the whole
 *    tensor; averaged over ranks that is (W-1)/W*count*size;
 *  - all-to-all: each rank sends its W-1 other blocks of count each, (W-1)*count*size;
 *  - barrier: nothing measurable. World 1 sends nothing. */
double fb_coll_wire_bytes(fb_coll c, int64_t count, fb_dtype t, int world) {
  if (world <= 1) return 0.0;
  const double e = (double)count * (double)fb_dtype_size(t);
  const double f = (double)(world - 1) / (double)world;
  switch (c) {
  case FB_COLL_ALL_GATHER:
  case FB_COLL_ALL_TO_ALL:
  case FB_COLL_REDUCE_SCATTER: return f * e * world;
  case FB_COLL_ALL_REDUCE: return 2.0 * f * e;
  case FB_COLL_BROADCAST:
  case FB_COLL_REDUCE: return f * e;
  case FB_COLL_BARRIER:
  case FB_NCOLL: break;
  }
  return 0.0;
}

void fb_coll_wire_split(fb_coll c, int64_t count, fb_dtype t, int world, int nodes,
                        double *intra, double *inter) {
  const double wire = fb_coll_wire_bytes(c, count, t, world);
  const int k = nodes < 1 ? 1 : nodes > world ? world : nodes;
  *inter = world > 1 ? wire * (double)(k - 1) / (double)(world - 1) : 0.0;
  *intra = wire - *inter;
}
