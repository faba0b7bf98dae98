/* `hsdp` (hybrid sharding: PyTorch FSDP1 HYBRID_SHARD, FSDP2 on a 2-D DeviceMesh): the W ranks
 * form a REPLICA x SHARD mesh, rank = replica_index * SHARD + shard_index, so a shard group is
 * SHARD consecutive ranks (inside a node) and a replica group the REPLICA ranks SHARD apart
 * (across nodes). Units are sliced fsdp-style over the shard group: all-gather before a unit's
 * forward and backward, reduce-scatter of its gradient after the backward; the reduced slice is
 * then all-reduced over the replica group (the same slice on every replica). Everything else is
 * fsdp's state machine (fsdp.c, fb_fsdp_setup_mesh): prefetch, reshard, accumulation modes,
 * mixed precision, the rate limiter and FSDP1's host work. With REPLICA = 1 it is fsdp, call for
 * call: --mesh 1xW ends bitwise equal to fsdp.
 *
 * The mesh: --mesh REPLICAxSHARD; without it SHARD = devices per node on sim when the world
 * is a multiple of a node larger than one (the profile's devices_per_node > 1), else SHARD =
 * world (REPLICA 1). The groups are the mesh's (strategies/mesh.h, engine/comm fb_comm_mesh):
 * on sim the shard group is costed inside a node (NVLink) and the replica all-reduce across
 * nodes (one NIC per member); the ledger counts them intra- and inter-node.
 *
 * Sums: on nccl, mpi and sim a gradient element is summed over the shard group, then over the
 * replicas. The local communicator sums both stages at once in world rank order
 * (exact_mesh), so a 2x2 run ends bitwise equal to single, as a flat one does. The exact
 * norm's bins are all-reduced over the shard group only: its slices partition every unit once and every replica holds the same reduced slices,
 * so each gradient element is counted once.
 * Memory per rank: parameters, gradients and AdamW state of 1/SHARD of every unit, padded to a
 * multiple of SHARD: 16 B x sum_u ceil(L(u)/SHARD) (~16P/SHARD), plus fsdp's transients (the
 * gathered units in flight and one unsharded gradient). REPLICA does not change it.
 * It does not model FSDP2's per-parameter (DTensor) layout, a separate stream for the replica
 * all-reduce, or HSDP's _HYBRID_SHARD_ZERO2. */
#include "fsdp.h"

static fb_status hsdp_setup(fb_rank *r) { return fb_fsdp_setup_mesh(r, true); }

const fb_strategy fb_strategy_hsdp = {
    .name = "hsdp",
    .summary = "fsdp inside shard groups of a REPLICA x SHARD mesh, gradients all-reduced "
               "across replicas",
    .setup = hsdp_setup,
    .teardown = fb_fsdp_teardown,
    .pre_forward = fb_fsdp_pre_forward,
    .post_forward = fb_fsdp_post_forward,
    .pre_backward = fb_fsdp_pre_backward,
    .post_backward = fb_fsdp_post_backward,
    .optimizer_step = fb_fsdp_step,
    .read_params = fb_fsdp_read_params,
    .host = &fb_fsdp_host,
    .tunes_prefetch = true,
    .tunes_reshard = true,
    .accum_modes = 1u << FB_ACCUM_NO_RESHARD | 1u << FB_ACCUM_NO_REDUCE,
    .shards_all = false, /* 1/SHARD per rank, 1/W only when REPLICA = 1 */
    .mesh = true,
    .state_ranges = fb_fsdp_state_ranges,
    .memory = "16P/SHARD (flat units padded to a multiple of SHARD) + gathered units in flight",
};
