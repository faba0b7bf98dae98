/* NCCL's own cost model (src/graph/tuning.cc and enqueue.cc, as restated in
 * ../shared/gpu-data/nccl-model.md): for a collective of a given size over n ranks on N nodes
 * it prices every enabled (algorithm, protocol) pair - Ring, Tree (all-reduce), NVLS
 * (all-reduce inside one NVSwitch node) x LL, LL128, Simple - as latency + bytes / bandwidth
 * with NCCL's constants, and takes the cheapest, as NCCL's tuner does (one departure: a
 * broadcast's or reduce's latency is its ring's fill, not the tuner's n network hops). The
 * profile supplies the graph (channels x GB/s per channel, in one node and across nodes), the
 * GPU generation and the host CPU vendor. It does not model CollNet/SHARP, PAT (off with 8
 * GPUs per node) or tuner plugins. Pure functions, no state. */
#ifndef FB_NCCL_MODEL_H
#define FB_NCCL_MODEL_H
#include "../device/device.h"
#include "hardware.h"

typedef enum fb_nccl_algo { FB_NCCL_RING = 0, FB_NCCL_TREE, FB_NCCL_NVLS, FB_NCCL_NALGO } fb_nccl_algo;
typedef enum fb_nccl_proto { FB_NCCL_LL = 0, FB_NCCL_LL128, FB_NCCL_SIMPLE, FB_NCCL_NPROTO } fb_nccl_proto;

typedef struct fb_nccl_choice {
  fb_nccl_algo algo;
  fb_nccl_proto proto;
  double latency_s;   /* the model's latency term */
  double algbw;       /* bytes/s of the user buffer */
  double seconds;     /* latency + bytes / algbw (no launch or framework overhead) */
} fb_nccl_choice;

/* The cheapest (algorithm, protocol) for `bytes` (all-gather / reduce-scatter: the full
 * gathered buffer, as NCCL sizes them) over `world` ranks, hw->devices_per_node per node.
 * world >= 2. */
fb_nccl_choice fb_nccl_predict(const fb_hardware *hw, fb_coll coll, double bytes, int world);
/* The ring graph's bus bandwidth across nodes, bytes/s: channels x GB/s per channel
 * (nccl_channels_net x nccl_channel_gbs_net), bounded by the node's adapters (nics_per_node x
 * nic_gbps) when the profile or the run (--nics-per-node, --nic-gbps) states them: a ring
 * crosses each node boundary once, so a node's NICs together carry it (nccl-model.md 3.2;
 * comm-mechanisms.md 2). Before the node-count scaling of fb_nccl_predict. */
double fb_nccl_net_busbw(const fb_hardware *hw);
const char *fb_nccl_algo_name(fb_nccl_algo a);
const char *fb_nccl_proto_name(fb_nccl_proto p);

#endif
