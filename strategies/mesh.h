/* The device mesh a sharded strategy runs on (--mesh REPLICAxSHARD): which mesh (--mesh, or the
 * strategy's default), its communicators (engine/comm: fb_comm_mesh), and the rank as a member
 * of its shard group - what the slice helpers (common.c) and a strategy's partition read as
 * rank, world and communicator. Without --mesh a strategy's mesh is 1 x W: the shard group is
 * r->comm itself and nothing else changes, call for call. It does not reduce anything itself
 * (fb_reduce_scatter_mesh, fb_reduce_mesh, fb_all_reduce_replicas do). */
#ifndef FB_STRATEGY_MESH_H
#define FB_STRATEGY_MESH_H
#include "strategy.h"

/* The mesh --mesh asks for; without it 1 x W, or with `node_default` (hsdp) SHARD = the
 * profile's devices_per_node on sim when the world is a multiple of a node larger than one.
 * Opens its groups (collective over r->comm: syncs r->commst first). */
fb_status fb_mesh_open(fb_rank *r, bool node_default, fb_comm_mesh *m);
void fb_mesh_close(fb_comm_mesh *m);

/* r as a member of its shard group: rank, world and communicator are the group's. */
static inline fb_rank fb_mesh_view(const fb_rank *r, const fb_comm_mesh *m) {
  fb_rank v = *r;
  v.comm = m->shard;
  v.world = m->shard->world;
  v.rank = m->shard->rank;
  return v;
}

/* Whether this rank writes the checkpoint ranges of its shard group: the first replica's do
 * (the others hold the same state). */
static inline bool fb_mesh_saves(const fb_comm_mesh *m) {
  return !m->replica || m->replica->rank == 0;
}

#endif
