/* A REPLICA x SHARD device mesh over a communicator (comm.h, fb_comm_mesh): its groups, and
 * the two stages of a gradient reduction on it - inside the shard group, then across the
 * replica group. On a backend with exact_mesh (local) the first stage is one call over the
 * whole world that sums in world rank order (comm_local.c), recorded as the shard group's
 * collective; the second is then recorded as the replica group's all-reduce and moves
 * nothing. Elsewhere both are the plain collectives on the two groups. It moves no data itself
 * and does not choose a mesh (strategies/mesh.c reads --mesh). */
#include "comm.h"
#include "comm_record.h"

fb_status fb_comm_mesh_open(fb_comm *world, int replicas, int shards, fb_comm_mesh *m) {
  *m = (fb_comm_mesh){.world = world, .shard = world, .replicas = replicas, .shards = shards};
  if (replicas < 1 || shards < 1 || (int64_t)replicas * shards != world->world)
    return FB_ERR(FB_EINTERNAL, "rank %d: a %dx%d mesh over %d ranks", world->rank, replicas,
                  shards, world->world);
  if (shards < world->world) FB_TRY(fb_comm_split_strided(world, shards, 1, &m->shard));
  fb_status st = FB_OK;
  if (replicas == world->world) m->replica = world;
  else if (replicas > 1) st = fb_comm_split_strided(world, replicas, shards, &m->replica);
  if (st != FB_OK) fb_comm_mesh_close(m);
  return st;
}

void fb_comm_mesh_close(fb_comm_mesh *m) {
  if (m->replica && m->replica != m->world) fb_comm_destroy(m->replica);
  if (m->shard && m->shard != m->world) fb_comm_destroy(m->shard);
  m->replica = NULL;
  m->shard = m->world;
}

static bool exact(const fb_comm_mesh *m) { return m->replica && m->world->ops->exact_mesh; }

/* Stage 1 over the world, recorded as the shard group's collective. */
static fb_status exact_stage(const fb_comm_mesh *m, fb_stream *s, int unit, fb_coll_call a) {
  FB_TRY(fb_comm_check_call(m->shard, s, &a));
  a.mesh = m->shards;
  return fb_comm_record(m->world, m->shard, s, unit, &a);
}

fb_status fb_reduce_scatter_mesh(const fb_comm_mesh *m, fb_stream *s, int unit, const void *send,
                                 void *recv, size_t count, fb_dtype t) {
  if (!exact(m)) return fb_reduce_scatter(m->shard, s, unit, send, recv, count, t);
  const fb_coll_call a = {FB_COLL_REDUCE_SCATTER, send, recv, count, t, 0, 0};
  return exact_stage(m, s, unit, a);
}

fb_status fb_reduce_mesh(const fb_comm_mesh *m, fb_stream *s, int unit, const void *send,
                         void *recv, size_t count, fb_dtype t, int root) {
  if (!exact(m)) return fb_reduce(m->shard, s, unit, send, recv, count, t, root);
  const fb_coll_call a = {FB_COLL_REDUCE, send, recv, count, t, root, 0};
  return exact_stage(m, s, unit, a);
}

fb_status fb_all_reduce_replicas(const fb_comm_mesh *m, fb_stream *s, int unit, void *buf,
                                 size_t count, fb_dtype t) {
  if (!m->replica) return FB_OK;
  if (!exact(m)) return fb_all_reduce(m->replica, s, unit, buf, buf, count, t);
  const fb_coll_call a = {FB_COLL_ALL_REDUCE, buf, buf, count, t, 0, 0};
  FB_TRY(fb_comm_check_call(m->replica, s, &a));
  return fb_comm_record(NULL, m->replica, s, unit, &a);
}
