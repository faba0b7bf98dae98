/* NCCL's tuning model (see nccl_model.h). Constants are NCCL v2.30.7's src/graph/tuning.cc as
 * restated in ../shared/gpu-data/nccl-model.md (sections 2-4); each table names its section.
 * Times in NCCL's units (microseconds, GB/s = 1e9 B/s) until the end. */
#include "nccl_model.h"

#include <math.h>

/* §2.1 base latency per (algorithm, protocol), us. NVLS replaces it by its hop latency. */
static const double base_lat[FB_NCCL_NALGO][FB_NCCL_NPROTO] = {
    [FB_NCCL_RING] = {6.6, 14.0, 8.4}, [FB_NCCL_TREE] = {6.8, 14.0, 8.4}, [FB_NCCL_NVLS] = {0, 0, 0}};
/* §2.1 hardware latency per hop, us: over NVLink and over the network. */
static const double nvlink_lat[FB_NCCL_NALGO][FB_NCCL_NPROTO] = {
    [FB_NCCL_RING] = {0.6, 1.9, 3.4}, [FB_NCCL_TREE] = {0.6, 1.25, 4.0}, [FB_NCCL_NVLS] = {0, 0, 25}};
static const double net_lat[FB_NCCL_NALGO][FB_NCCL_NPROTO] = {
    [FB_NCCL_RING] = {2.7, 4.0, 14.0}, [FB_NCCL_TREE] = {5.0, 8.5, 14.0}, [FB_NCCL_NVLS] = {0, 0, 18}};

/* §3.3 per-channel caps, GB/s, by GPU generation (Ampere, Hopper) and nodes (1, 2, >2). */
static const double ring_ll128_cap[2][3] = {{20, 20, 20}, {36.7, 36.7, 36.7}};
static const double tree_ll128_cap[2][3] = {{20, 20, 20}, {36.7, 36.7, 29.0}};
static const double tree_cap[2][3] = {{24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}};
/* §3.3 llMaxBw: one node by GPU generation; several nodes by CPU vendor (Intel, AMD). */
static const double ll_max_node[2] = {87.7, 141.0};
static const double ll_max_net[2][2] = {{39.0, 20.4}, {22.5, 19.0}}; /* [vendor][N2, N>2] */
/* §3.4 tree correction factors by k = floor(log2(bytes / 64)), 64 B ... 256 MiB. */
static const double tree_corr[FB_NCCL_NPROTO][23] = {
    {1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1},
    {1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

const char *fb_nccl_algo_name(fb_nccl_algo a) {
  static const char *const n[] = {"ring", "tree", "nvls"};
  return a < FB_NCCL_NALGO ? n[a] : "?";
}
const char *fb_nccl_proto_name(fb_nccl_proto p) {
  static const char *const n[] = {"LL", "LL128", "Simple"};
  return p < FB_NCCL_NPROTO ? n[p] : "?";
}

typedef struct topo {
  int n, nodes, ppn;
  int gen;        /* 0 Ampere, 1 Hopper */
  int col;        /* 0: one node, 1: two nodes, 2: more */
  double C, b;    /* graph channels and GB/s per channel */
} topo;

double fb_nccl_net_busbw(const fb_hardware *hw) {
  const double graph = hw->nccl_ch_net * hw->nccl_bw_net;
  if (!(hw->nics_per_node > 0 && hw->nic_bw > 0)) return graph;
  return fmin(graph, hw->nics_per_node * hw->nic_bw);
}

/* Bus bandwidth across N nodes over the graph's (1 at 2 nodes), `per` per doubling beyond:
 * NVIDIA/nccl#1229 measured reduce-scatter at 360, 345, 320, 300, 280, 260 GB/s on 4 ... 128
 * H100 nodes (8 x 400 Gb/s, graph 8 x 48 = 384): 0.937 per doubling (the least-squares slope
 * of log bandwidth on log2 nodes), and 360 / 384 = 0.937 at 4 nodes, i.e. 1 at 2. A rate
 * measured on one fabric, used for every profile's network (docs/simulator.md). */
static double net_scale(double per, int nodes) { return pow(per, log2(nodes / 2.0)); }

static topo topo_of(const fb_hardware *hw, int world) {
  topo t = {.n = world};
  t.ppn = hw->devices_per_node < world ? hw->devices_per_node : world;
  t.nodes = (world + t.ppn - 1) / t.ppn;
  t.gen = hw->gpu_arch == FB_ARCH_HOPPER ? 1 : 0;
  t.col = t.nodes == 1 ? 0 : t.nodes == 2 ? 1 : 2;
  t.C = t.nodes == 1 ? hw->nccl_ch_node : hw->nccl_ch_net;
  t.b = (t.nodes == 1 ? hw->nccl_bw_node : fb_nccl_net_busbw(hw) / (t.C > 0 ? t.C : 1)) * 1e-9;
  if (t.nodes > 2 && hw->nccl_net_doubling > 0) t.b *= net_scale(hw->nccl_net_doubling, t.nodes);
  return t;
}

/* All-to-all (grouped send/recv, zeropp's qgZ) is priced as an all-gather of the same buffer:
 * each rank sends (n-1)/n of it, n-1 steps; an assumption, not fitted on any all-to-all row.
 * Ring steps of a collective (§2.2): all-reduce 2(n-1), all-gather / reduce-scatter n-1,
 * broadcast / reduce n. */
static double ring_steps(fb_coll c, int n) {
  return c == FB_COLL_ALL_REDUCE ? 2.0 * (n - 1) : c == FB_COLL_BROADCAST || c == FB_COLL_REDUCE ? n : n - 1;
}
/* Of those, the steps that cross a node boundary (NCCL's nInterSteps): all-reduce 2(N-1),
 * broadcast / reduce N, all-gather / reduce-scatter N-1; none on one node. */
static double ring_inter_steps(fb_coll c, int nodes) {
  if (nodes == 1) return 0;
  if (c == FB_COLL_ALL_REDUCE) return 2.0 * (nodes - 1);
  return c == FB_COLL_BROADCAST || c == FB_COLL_REDUCE ? nodes : nodes - 1;
}

/* §2.2 latency, us. Broadcast and reduce depart from tuning.cc: NCCL's tuner charges each of
 * their n steps a network hop (L0 + n·ℓ_net when channels differ, "waiting for proper chunk
 * modeling"), a selection heuristic; here their chain is priced like the other rings, its n
 * steps at NVLink's hop latency but for the N that cross nodes (NCCL's own nInterSteps).
 * docs/simulator.md ("What the framework adds") gives the InternLM evidence both ways. */
static double latency(const fb_hardware *hw, const topo *t, fb_coll c, int a, int p) {
  double net = net_lat[a][p], hop = nvlink_lat[a][p];
  if (t->ppn == 1) net = net_lat[FB_NCCL_TREE][p];
  if (a == FB_NCCL_NVLS) return hop + (t->nodes > 1 ? net : 0);
  if (a == FB_NCCL_TREE)
    return base_lat[a][p] + 2.0 * ((t->ppn - 1) * hop + floor(log2((double)t->nodes)) * net);
  double s = ring_steps(c, t->n);
  double s_inter = ring_inter_steps(c, t->nodes);
  double o_net = t->nodes == 1 ? 0 : (hw->cpu_vendor ? 2.0 : 1.0) * (p == FB_NCCL_SIMPLE ? 3 : 1);
  return base_lat[a][p] + (s - s_inter) * fmax(hop, o_net) + s_inter * net;
}

/* §3.4 algorithm bandwidth, GB/s of the user buffer (0 = not available). */
static double algbw(const fb_hardware *hw, const topo *t, fb_coll c, int a, int p, double bytes) {
  double B = t->C * t->b, ll_max = t->nodes == 1 ? ll_max_node[t->gen]
                                                 : ll_max_net[hw->cpu_vendor][t->nodes > 2];
  if (a == FB_NCCL_NVLS) {
    if (c != FB_COLL_ALL_REDUCE || t->nodes > 1 || p != FB_NCCL_SIMPLE || !(hw->nvls_busbw > 0))
      return 0;
    return hw->nvls_busbw * 1e-9 * t->n / ring_steps(c, t->n);
  }
  if (a == FB_NCCL_TREE) {
    if (c != FB_COLL_ALL_REDUCE) return 0;
    double bt = fmin(0.92 * B, t->C * tree_cap[t->gen][t->col]);
    if (p == FB_NCCL_LL) bt = fmin(bt / 3.8, ll_max);
    if (p == FB_NCCL_LL128)
      bt = fmin(bt * (t->nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), t->C * tree_ll128_cap[t->gen][t->col]);
    int k = bytes >= 64 ? (int)floor(log2(bytes / 64)) : 0;
    return 0.5 * bt * tree_corr[p][k < 0 ? 0 : k > 22 ? 22 : k];
  }
  if (p == FB_NCCL_LL) B = fmin(ll_max, 0.5 * B);
  if (p == FB_NCCL_LL128) B = fmin(0.92 * B, t->C * ring_ll128_cap[t->gen][t->col]);
  return B * t->n / ring_steps(c, t->n);
}

fb_nccl_choice fb_nccl_predict(const fb_hardware *hw, fb_coll coll, double bytes, int world) {
  topo t = topo_of(hw, world < 2 ? 2 : world);
  fb_nccl_choice best = {.seconds = INFINITY};
  for (int a = 0; a < FB_NCCL_NALGO; a++)
    for (int p = 0; p < FB_NCCL_NPROTO; p++) {
      double bw = algbw(hw, &t, coll, a, p, bytes);
      if (!(bw > 0)) continue;
      double lat = latency(hw, &t, coll, a, p);
      /* §2.3 ring plateau: ring Simple all-reduce across nodes with >= 64 B per channel-rank */
      if (a == FB_NCCL_RING && p == FB_NCCL_SIMPLE && coll == FB_COLL_ALL_REDUCE &&
          t.nodes > 1 && bytes / (t.C * t.n) >= 64)
        lat *= 1.4;
      double us = lat + bytes / (1000.0 * bw);
      if (us * 1e-6 < best.seconds)
        best = (fb_nccl_choice){.algo = a, .proto = p, .latency_s = lat * 1e-6,
                                .algbw = bw * 1e9, .seconds = us * 1e-6};
    }
  return best;
}
