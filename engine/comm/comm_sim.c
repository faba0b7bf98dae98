/* The sim communicator: no data moves. Each collective checks its arguments exactly as a real
 * backend would (stream, buffers, dtype, root) and returns; its duration is accounted by the
 * fb_* wrappers in comm.c through the sim device's account() and the cost model
 * (engine/sim/cost_model.c). Every rank is independent: nothing is shared between ranks, so a
 * run can simulate any subset of them. A split (fb_comm_split_strided) is therefore local too:
 * the sub-communicator of the given size on the same device, this rank's place in it, and its
 * stride (set by comm.c) telling the cost model whether the group spans nodes. */
#include <stdlib.h>

#include "comm.h"

static fb_status check_common(fb_comm *c, fb_stream *s, const char *what, size_t count,
                              fb_dtype t) {
  if (!s) return FB_ERR(FB_EINTERNAL, "sim %s on rank %d: no stream", what, c->rank);
  if (t != FB_F32 && t != FB_BF16 && t != FB_F64 && t != FB_U64)
    return FB_ERR(FB_EUNSUPPORTED, "sim %s on rank %d: dtype %s is not supported (fp32, bf16, "
                  "f64, u64)", what, c->rank, fb_dtype_name(t));
  (void)count;
  return FB_OK;
}

static fb_status check_bufs(fb_comm *c, const char *what, size_t count, const void *a,
                            const void *b) {
  if (count > 0 && (!a || !b))
    return FB_ERR(FB_EINTERNAL, "sim %s on rank %d: NULL buffer for %zu elements", what, c->rank,
                  count);
  return FB_OK;
}

static fb_status check_root(fb_comm *c, const char *what, int root) {
  if (root < 0 || root >= c->world)
    return FB_ERR(FB_EINTERNAL, "sim %s on rank %d: root %d outside [0, %d)", what, c->rank,
                  root, c->world);
  return FB_OK;
}

static fb_status sim_all_gather(fb_comm *c, fb_stream *s, const void *send, void *recv,
                                size_t count, fb_dtype t) {
  FB_TRY(check_common(c, s, "all_gather", count, t));
  return check_bufs(c, "all_gather", count, send, recv);
}

static fb_status sim_reduce_scatter(fb_comm *c, fb_stream *s, const void *send, void *recv,
                                    size_t count, fb_dtype t) {
  FB_TRY(check_common(c, s, "reduce_scatter", count, t));
  return check_bufs(c, "reduce_scatter", count, send, recv);
}

static fb_status sim_all_reduce(fb_comm *c, fb_stream *s, const void *send, void *recv,
                                size_t count, fb_dtype t) {
  FB_TRY(check_common(c, s, "all_reduce", count, t));
  return check_bufs(c, "all_reduce", count, send, recv);
}

static fb_status sim_broadcast(fb_comm *c, fb_stream *s, void *buf, size_t count, fb_dtype t,
                               int root) {
  FB_TRY(check_common(c, s, "broadcast", count, t));
  FB_TRY(check_root(c, "broadcast", root));
  return check_bufs(c, "broadcast", count, buf, buf);
}

static fb_status sim_reduce(fb_comm *c, fb_stream *s, const void *send, void *recv, size_t count,
                            fb_dtype t, int root) {
  FB_TRY(check_common(c, s, "reduce", count, t));
  FB_TRY(check_root(c, "reduce", root));
  /* recv matters on the root only, as with NCCL / MPI */
  return check_bufs(c, "reduce", count, send, c->rank == root ? recv : send);
}

static fb_status sim_barrier(fb_comm *c, fb_stream *s) {
  if (!s) return FB_ERR(FB_EINTERNAL, "sim barrier on rank %d: no stream", c->rank);
  return FB_OK;
}

static void sim_destroy(fb_comm *c) { free(c); }

static fb_status sim_split(fb_comm *c, int color, int key, int size, fb_comm **out) {
  (void)color;
  if (size < 1)
    return FB_ERR(FB_EUNSUPPORTED, "sim communicator on rank %d: a split needs the group's size "
                  "(fb_comm_split_strided): simulated ranks cannot compare colors", c->rank);
  return fb_comm_sim_create(c->dev, key, size, out);
}

const fb_comm_ops fb_sim_comm_ops = {
    .name = "sim",
    .all_gather = sim_all_gather,
    .reduce_scatter = sim_reduce_scatter,
    .all_reduce = sim_all_reduce,
    .broadcast = sim_broadcast,
    .reduce = sim_reduce,
    .barrier = sim_barrier,
    .split = sim_split,
    .destroy = sim_destroy,
};

fb_status fb_comm_sim_create(fb_device *dev, int rank, int world, fb_comm **out) {
  if (world < 1 || rank < 0 || rank >= world)
    return FB_ERR(FB_EUSAGE, "sim communicator: rank %d of world %d is invalid (0 <= rank < "
                  "world, world >= 1)", rank, world);
  if (!dev || !dev->simulated)
    return FB_ERR(FB_EUSAGE, "the sim communicator needs the sim device (--backend sim)");
  fb_comm *c = calloc(1, sizeof *c);
  if (!c) return FB_ERR(FB_ENOMEM, "sim communicator: out of host memory");
  c->ops = &fb_sim_comm_ops;
  c->rank = rank;
  c->world = world;
  c->dev = dev;
  c->timeout_s = 0;
  *out = c;
  return FB_OK;
}
