/* Cost model formulas (see docs/simulator.md for the derivation and the sources):
 *  - GEMM / attention: launch + max(flops / (peak[dtype] * eff(size)), bytes / (bw * mem_eff))
 *  - memory-bound ops: launch + bytes / (bw * mem_eff), or bytes / the kernel's own measured
 *    rate when the profile lists its name (kernel_gbs)
 *  - collectives: ring (and, for all-reduce / barrier, a tree alternative: like NCCL's tuner
 *    we take the cheaper), hierarchical when the ranks span nodes: the intra-node and the
 *    network stages pipeline, so the slower stage's bandwidth term bounds, both latencies add.
 *    With `collectives: shared_memory` (the local communicator: ranks are threads of one
 *    machine) the collective is its own algorithm instead: every rank copies or reduces whole
 *    buffers through the one memory system, so the bytes all ranks move, over the machine's
 *    copy bandwidth, plus one latency per group barrier. A ring on a shared host (MPI
 *    processes on one machine) shares the machine's bandwidth among the W ranks.
 *  - world 1: a collective into another buffer is a device copy (NCCL copies); broadcast and
 *    barrier cost nothing. The local communicator (shared_memory) still hands the collective
 *    to its comm thread and runs its copy or reduce loop there: the shared-memory formula at
 *    W = 1 with one latency (the hand-off; no partner to meet).
 * It keeps no state and knows nothing about streams (device_sim.c does). */
#include "cost_model.h"

#include <math.h>

double fb_cost_gemm_efficiency(const fb_hardware *hw, double size) {
  if (!(size > 0)) return hw->gemm_max_eff * 1e-3; /* degenerate shape: tiny but finite */
  return hw->gemm_max_eff * size / (size + hw->gemm_half_size);
}

/* Rates of one rank: a shared host splits its cores and memory among the ranks. */
static double rank_share(const fb_hardware *hw, int world) {
  return hw->shared_host && world > 1 ? 1.0 / world : 1.0;
}

static double gemm_seconds(const fb_hardware *hw, const fb_op_cost *c, int world) {
  double eff = fb_cost_gemm_efficiency(hw, fb_op_gemm_size(c));
  if (c->kind == FB_OP_ATTN) eff *= hw->attn_eff;
  double share = rank_share(hw, world);
  double t_compute = c->flops / (fb_hardware_peak(hw, c->dtype) * share * eff);
  double t_memory = c->bytes / (hw->mem_bw * hw->mem_eff * share);
  return hw->launch_s + fmax(t_compute, t_memory);
}

/* A kernel the profile measured (kernel_gbs) runs at its own rate; others on the roofline. */
static double memory_seconds(const fb_hardware *hw, const fb_op_cost *c, int world) {
  double bw = fb_hardware_kernel_bw(hw, c->name);
  if (!(bw > 0)) bw = hw->mem_bw * hw->mem_eff;
  return hw->launch_s + c->bytes / (bw * rank_share(hw, world));
}

/* Bandwidth factor and latency hop count of one ring stage over n ranks. */
typedef struct stage {
  double lat;   /* seconds */
  double bw_s;  /* seconds of bandwidth term */
} stage;

/* Ring stage over n ranks moving `bytes` of full buffer with per-rank send factor:
 * all-gather / reduce-scatter (n-1)/n, all-reduce 2(n-1)/n, broadcast / reduce 1 (pipelined). */
static stage ring_stage(fb_coll coll, double bytes, int n, double bw, double lat) {
  stage s = {0, 0};
  if (n <= 1) return s;
  double f, hops;
  switch (coll) {
  case FB_COLL_ALL_GATHER:
  case FB_COLL_REDUCE_SCATTER: f = (double)(n - 1) / n; hops = n - 1; break;
  case FB_COLL_ALL_REDUCE: f = 2.0 * (n - 1) / n; hops = 2.0 * (n - 1); break;
  case FB_COLL_BARRIER: f = 0; hops = 2.0 * (n - 1); break;
  default: f = 1; hops = n - 1; break; /* broadcast, reduce: pipelined chain */
  }
  s.lat = hops * lat;
  s.bw_s = f * bytes / bw;
  return s;
}

/* Tree (NCCL's double binary tree): log2 hops up and down, each rank sends the buffer about
 * once per direction. NCCL offers it for all-reduce only (and we for barrier, an empty one). */
static stage tree_stage(fb_coll coll, double bytes, int n, double bw, double lat) {
  stage s = {0, 0};
  if (n <= 1) return s;
  double depth = ceil(log2((double)n));
  s.lat = 2.0 * depth * lat;
  s.bw_s = coll == FB_COLL_BARRIER ? 0 : 2.0 * bytes / bw;
  return s;
}

static double combine(stage intra, stage inter) {
  return intra.lat + inter.lat + fmax(intra.bw_s, inter.bw_s);
}

/* Bytes every rank together reads and writes in the local communicator's algorithm
 * (engine/comm/comm_local.c) for a payload S over W ranks: all-gather copies all W shards
 * into each rank's buffer (2S per rank); reduce-scatter and reduce sum a 1/W chunk of W
 * buffers (S read + S/W written per rank); all-reduce reduces a chunk, then copies the W-1
 * others' chunks (S + S/W + 2(W-1)S/W per rank); broadcast copies S into every non-root. */
double fb_cost_shared_memory_bytes(fb_coll coll, double bytes, int world) {
  double S = bytes, W = world;
  switch (coll) {
  case FB_COLL_ALL_GATHER: return 2.0 * S * W;
  case FB_COLL_REDUCE_SCATTER:
  case FB_COLL_REDUCE: return S * (W + 1.0);
  case FB_COLL_ALL_REDUCE: return S * (3.0 * W - 1.0);
  case FB_COLL_BROADCAST: return 2.0 * S * (W - 1.0);
  default: return 0; /* barrier */
  }
}

/* Group barriers the local communicator meets per collective: one to publish the buffers and
 * one to finish; all-reduce one more between its reduce and copy phases. */
double fb_cost_shared_memory_barriers(fb_coll coll) {
  switch (coll) {
  case FB_COLL_BARRIER: return 1;
  case FB_COLL_ALL_REDUCE: return 3;
  default: return 2;
  }
}

/* A collective over 1 rank: a copy of the buffer (read + write) unless nothing moves. */
static double single_rank_seconds(const fb_hardware *hw, fb_coll coll, double bytes) {
  if (coll == FB_COLL_BROADCAST || coll == FB_COLL_BARRIER || !(bytes > 0)) return 0;
  double bw = fb_hardware_kernel_bw(hw, "copy_d2d");
  if (!(bw > 0)) bw = hw->mem_bw * hw->mem_eff;
  return hw->launch_s + 2.0 * bytes / bw;
}

double fb_cost_collective(const fb_hardware *hw, fb_coll coll, double bytes, int world) {
  if (bytes < 0) bytes = 0;
  if (hw->collectives == FB_COLLS_SHARED_MEMORY) /* intra_bw: the machine's copy bandwidth */
    return hw->launch_s + (world > 1 ? fb_cost_shared_memory_barriers(coll) : 1) * hw->intra_lat +
           fb_cost_shared_memory_bytes(coll, bytes, world > 1 ? world : 1) /
               (hw->intra_bw * hw->coll_eff);
  if (world <= 1) return single_rank_seconds(hw, coll, bytes);
  int g = hw->devices_per_node < world ? hw->devices_per_node : world; /* ranks per node */
  int nodes = (world + g - 1) / g;
  /* on a shared host every rank's ring runs at once through the one memory system: the
   * profile's bandwidth is the machine's, each rank gets 1/W of it */
  double share = rank_share(hw, world);
  double intra_bw = hw->intra_bw * hw->coll_eff * share;
  double inter_bw = hw->inter_bw * hw->coll_eff * share;
  double t_ring, t_tree = INFINITY;
  if (nodes == 1) {
    t_ring = combine(ring_stage(coll, bytes, g, intra_bw, hw->intra_lat), (stage){0, 0});
    if (coll == FB_COLL_ALL_REDUCE || coll == FB_COLL_BARRIER)
      t_tree = combine(tree_stage(coll, bytes, g, intra_bw, hw->intra_lat), (stage){0, 0});
  } else {
    /* Network stage: g parallel rings (one per NIC / rail), each carrying 1/g of the buffer
     * across the nodes. Intra-node stage: the full buffer over NVLink among g ranks. */
    stage inter = ring_stage(coll, bytes / g, nodes, inter_bw, hw->inter_lat);
    stage intra = ring_stage(coll, bytes, g, intra_bw, hw->intra_lat);
    t_ring = combine(intra, inter);
    if (coll == FB_COLL_ALL_REDUCE || coll == FB_COLL_BARRIER) {
      stage ti = tree_stage(coll, bytes / g, nodes, inter_bw, hw->inter_lat);
      stage ta = tree_stage(coll, bytes, g, intra_bw, hw->intra_lat);
      t_tree = combine(ta, ti);
    }
  }
  return hw->launch_s + fmin(t_ring, t_tree);
}

/* Payload of a collective from its element count (see fb_op_cost: per-rank for AG / RS). */
static double coll_payload(const fb_op_cost *c, int world) {
  double elt = (double)fb_dtype_size(c->dtype);
  switch (c->coll) {
  case FB_COLL_ALL_GATHER:
  case FB_COLL_REDUCE_SCATTER: return (double)c->count * world * elt;
  case FB_COLL_BARRIER: return 0;
  default: return (double)c->count * elt;
  }
}

double fb_cost_seconds(const fb_hardware *hw, const fb_op_cost *c, int world) {
  switch (c->kind) {
  case FB_OP_GEMM:
  case FB_OP_ATTN: return gemm_seconds(hw, c, world);
  case FB_OP_MEM:
  case FB_OP_OPTIM: return memory_seconds(hw, c, world);
  case FB_OP_COLL: {
    int w = c->world > 0 ? c->world : world;
    return fb_cost_collective(hw, c->coll, coll_payload(c, w < 1 ? 1 : w), w < 1 ? 1 : w);
  }
  default: return 0;
  }
}
