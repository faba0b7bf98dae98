/* Communicator registry and the recording wrappers every caller goes through: check the
 * arguments, stamp start/end marks on the stream around the backend's collective, let the sim
 * device account its cost and hand the op to the recorder. It moves no data itself
 * (comm_local.c, comm_mpi.c, comm_sim.c and the CUDA module's comm_nccl.c do). */
#include "comm.h"

#include <string.h>

#include "../backends/registry.h"
#include "../device/recorder.h"
#include "comm_record.h"
#include "comm_staged.h"

extern const fb_comm_ops fb_local_comm_ops;
#ifdef FB_HAVE_MPI
extern const fb_comm_ops fb_mpi_comm_ops;
#endif
/* Tables owned by the other backends' files (comm_sim.c; comm_nccl.c is in the CUDA module,
 * engine/backends/cuda/, loaded when nccl is looked up). */
extern const fb_comm_ops fb_sim_comm_ops;
#ifdef FB_HAVE_CUDA
#include "../backends/cuda_module.h"
#endif

const fb_comm_ops *fb_comm_lookup(const char *name) {
  if (!name) return NULL;
  if (!strcmp(name, "local")) return &fb_local_comm_ops;
#ifdef FB_HAVE_MPI
  if (!strcmp(name, "mpi")) return &fb_mpi_comm_ops;
#endif
  if (!strcmp(name, "sim")) return &fb_sim_comm_ops;
#ifdef FB_HAVE_CUDA
  if (!strcmp(name, "nccl")) {
    const fb_cuda_module *m = fb_cuda_module_load(NULL, 0);
    return m ? m->nccl_ops : NULL;
  }
#endif
  return NULL;
}

void fb_comm_destroy(fb_comm *c) {
  if (!c) return;
  fb_comm_stage_free(c);
  c->ops->destroy(c);
}

void fb_comm_place(fb_comm *c, int first, int node_ranks) {
  c->first = first;
  c->node_ranks = node_ranks;
  const int st = c->stride > 1 ? c->stride : 1;
  int nodes = 1;
  for (int i = 1; node_ranks > 0 && i < c->world; i++) /* members ascend: count node changes */
    nodes += (first + i * st) / node_ranks != (first + (i - 1) * st) / node_ranks;
  c->nodes = nodes;
}

/* `base`: c's rank of the group's member 0 (a strided split), -1 when not known (colors). */
static fb_status split(fb_comm *c, int color, int key, int size, int stride, int base,
                       fb_comm **out) {
  if (!c->ops->split)
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: the %s communicator cannot be split", c->rank,
                  c->ops->name);
  FB_TRY(c->ops->split(c, color, key, size, out));
  fb_comm *s = *out;
  if (size > 0 && s->world != size) {
    fb_comm_destroy(s);
    *out = NULL;
    return FB_ERR(FB_EINTERNAL, "rank %d: split: the group of color %d has %d ranks, expected %d",
                  c->rank, color, s->world, size);
  }
  const int parent = c->stride > 1 ? c->stride : 1;
  s->stride = parent * stride;
  if (base >= 0) {
    fb_comm_place(s, c->first + base * parent, c->node_ranks);
  } else {
    s->first = c->first;
    s->node_ranks = c->node_ranks;
    s->nodes = c->nodes;
  }
  return FB_OK;
}

fb_status fb_comm_split(fb_comm *c, int color, int key, fb_comm **out) {
  *out = NULL;
  if (!c) return FB_ERR(FB_EINTERNAL, "split: communicator is NULL");
  if (color < 0)
    return FB_ERR(FB_EINTERNAL, "rank %d: split: color %d is negative (want >= 0)", c->rank, color);
  return split(c, color, key, 0, 1, -1, out);
}

fb_status fb_comm_split_strided(fb_comm *c, int size, int stride, fb_comm **out) {
  *out = NULL;
  if (!c) return FB_ERR(FB_EINTERNAL, "split: communicator is NULL");
  if (size < 1 || stride < 1 || c->world % size || c->world / size % stride)
    return FB_ERR(FB_EINTERNAL, "rank %d: split of %d ranks into groups of %d ranks %d apart: "
                  "the world must be a multiple of size x stride", c->rank, c->world, size,
                  stride);
  const int block = size * stride;
  const int color = c->rank / block * block + c->rank % stride;
  return split(c, color, c->rank / stride % size, size, stride, color, out);
}

/* FB_I8 (quantised bytes) only moves: all-gather, broadcast, all-to-all. */
static bool dtype_ok(fb_coll op, fb_dtype t) {
  if (t == FB_I8)
    return op == FB_COLL_ALL_GATHER || op == FB_COLL_BROADCAST || op == FB_COLL_ALL_TO_ALL;
  return t == FB_F32 || t == FB_F64 || t == FB_U64 || t == FB_BF16;
}

/* Checks what every collective needs; `need_send`/`need_recv` say which buffers must exist
 * when count > 0. */
static fb_status check_args(const fb_comm *c, const fb_stream *s, fb_coll op, const void *send,
                            bool need_send, const void *recv, bool need_recv, size_t count,
                            fb_dtype t) {
  const char *name = fb_coll_name(op);
  if (!c) return FB_ERR(FB_EINTERNAL, "%s: communicator is NULL", name);
  if (!s) return FB_ERR(FB_EINTERNAL, "rank %d: %s: stream is NULL", c->rank, name);
  if (!dtype_ok(op, t))
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: %s: dtype %s is not supported (allowed: fp32, "
                  "fp64, u64, bf16; i8 to move, not to sum)", c->rank, name, fb_dtype_name(t));
  if (count > (size_t)INT64_MAX / 16)
    return FB_ERR(FB_EINTERNAL, "rank %d: %s: count %zu is too large", c->rank, name, count);
  if (count > 0 && need_send && !send)
    return FB_ERR(FB_EINTERNAL, "rank %d: %s of %zu elements: send buffer is NULL", c->rank,
                  name, count);
  if (count > 0 && need_recv && !recv)
    return FB_ERR(FB_EINTERNAL, "rank %d: %s of %zu elements: recv buffer is NULL", c->rank,
                  name, count);
  return FB_OK;
}

static fb_status check_root(const fb_comm *c, fb_coll op, int root) {
  if (root < 0 || root >= c->world)
    return FB_ERR(FB_EINTERNAL, "rank %d: %s: root %d out of range 0..%d", c->rank,
                  fb_coll_name(op), root, c->world - 1);
  return FB_OK;
}

typedef fb_coll_call coll_call;

/* The one way down to a backend: its issue, staged through pinned host buffers when a
 * communicator that reads buffers on the host meets a device the host may not touch. */
static fb_status issue(fb_comm *c, fb_stream *s, const coll_call *a) {
  c->staged = c->ops->host_memory && !fb_device_caps_of(c->dev)->host_access;
  return c->staged ? fb_comm_issue_staged(c, s, a) : c->ops->issue(c, s, a);
}

/* Whether the call leaves this rank's own part where it is (fb_op_cost.in_place). */
static bool in_place(const fb_comm *c, const coll_call *a) {
  const size_t own = (size_t)c->rank * a->count * fb_dtype_size(a->t);
  if (a->mesh > 0) return false;
  switch (a->op) {
  case FB_COLL_ALL_REDUCE:
  case FB_COLL_BROADCAST:
  case FB_COLL_REDUCE: return a->send == a->recv;
  case FB_COLL_ALL_GATHER: return a->recv && a->send == (const char *)a->recv + own;
  case FB_COLL_REDUCE_SCATTER: return a->send && a->recv == (const char *)a->send + own;
  default: return false;
  }
}

fb_status fb_comm_record(fb_comm *on, fb_comm *as, fb_stream *s, int unit, const coll_call *a) {
  fb_device *dev = as->dev;
  const fb_op_cost cost = {
      .kind = FB_OP_COLL,
      .name = fb_coll_name(a->op),
      .coll = a->op,
      .count = (int64_t)a->count,
      .dtype = a->t,
      .world = as->world,
      .stride = as->stride,
      .nodes = as->nodes,
      .in_place = in_place(as, a),
      .bytes = fb_coll_bytes(a->op, (int64_t)a->count, a->t, as->world),
  };
  uint64_t t0 = dev->ops->mark(dev, s);
  if (on) FB_TRY(issue(on, s, a));
  if (dev->ops->account) dev->ops->account(dev, s, &cost);
  uint64_t t1 = dev->ops->mark(dev, s);
  if (dev->rec) fb_recorder_op(dev->rec, s, &cost, unit, t0, t1);
  return FB_OK;
}

static fb_status recorded(fb_comm *c, fb_stream *s, int unit, const coll_call *a) {
  return fb_comm_record(c, c, s, unit, a);
}

fb_status fb_comm_check_call(const fb_comm *c, const fb_stream *s, const coll_call *a) {
  const bool root_only = a->op == FB_COLL_REDUCE;
  FB_TRY(check_args(c, s, a->op, a->send, a->op != FB_COLL_BARRIER, a->recv,
                    a->op != FB_COLL_BARRIER && (!root_only || c->rank == a->root), a->count,
                    a->t));
  if (a->op == FB_COLL_BROADCAST || a->op == FB_COLL_REDUCE) FB_TRY(check_root(c, a->op, a->root));
  return FB_OK;
}

fb_status fb_all_gather(fb_comm *c, fb_stream *s, int unit, const void *send, void *recv,
                        size_t count, fb_dtype t) {
  FB_TRY(check_args(c, s, FB_COLL_ALL_GATHER, send, true, recv, true, count, t));
  const coll_call a = {FB_COLL_ALL_GATHER, send, recv, count, t, 0, 0};
  return recorded(c, s, unit, &a);
}

fb_status fb_all_to_all(fb_comm *c, fb_stream *s, int unit, const void *send, void *recv,
                        size_t count, fb_dtype t) {
  FB_TRY(check_args(c, s, FB_COLL_ALL_TO_ALL, send, true, recv, true, count, t));
  if (count > 0 && send == recv)
    return FB_ERR(FB_EINTERNAL, "rank %d: all_to_all: send and recv must not alias", c->rank);
  const coll_call a = {FB_COLL_ALL_TO_ALL, send, recv, count, t, 0, 0};
  return recorded(c, s, unit, &a);
}

fb_status fb_reduce_scatter(fb_comm *c, fb_stream *s, int unit, const void *send, void *recv,
                            size_t count, fb_dtype t) {
  FB_TRY(check_args(c, s, FB_COLL_REDUCE_SCATTER, send, true, recv, true, count, t));
  const coll_call a = {FB_COLL_REDUCE_SCATTER, send, recv, count, t, 0, 0};
  return recorded(c, s, unit, &a);
}

fb_status fb_all_reduce(fb_comm *c, fb_stream *s, int unit, const void *send, void *recv,
                        size_t count, fb_dtype t) {
  FB_TRY(check_args(c, s, FB_COLL_ALL_REDUCE, send, true, recv, true, count, t));
  const coll_call a = {FB_COLL_ALL_REDUCE, send, recv, count, t, 0, 0};
  return recorded(c, s, unit, &a);
}

fb_status fb_broadcast(fb_comm *c, fb_stream *s, int unit, void *buf, size_t count, fb_dtype t,
                       int root) {
  FB_TRY(check_args(c, s, FB_COLL_BROADCAST, buf, true, buf, true, count, t));
  FB_TRY(check_root(c, FB_COLL_BROADCAST, root));
  const coll_call a = {FB_COLL_BROADCAST, buf, buf, count, t, root, 0};
  return recorded(c, s, unit, &a);
}

/* recv matters on the root only (as in NCCL / MPI); other ranks may pass NULL. */
fb_status fb_reduce(fb_comm *c, fb_stream *s, int unit, const void *send, void *recv,
                    size_t count, fb_dtype t, int root) {
  FB_TRY(check_args(c, s, FB_COLL_REDUCE, send, true, recv, c && c->rank == root, count, t));
  FB_TRY(check_root(c, FB_COLL_REDUCE, root));
  const coll_call a = {FB_COLL_REDUCE, send, recv, count, t, root, 0};
  return recorded(c, s, unit, &a);
}

fb_status fb_comm_unrecorded(fb_comm *c, fb_stream *s, fb_coll op, const void *send, void *recv,
                             size_t count, fb_dtype t, int root) {
  FB_TRY(check_args(c, s, op, send, op != FB_COLL_BARRIER, recv,
                    op != FB_COLL_BARRIER && (op != FB_COLL_REDUCE || c->rank == root), count, t));
  if (op == FB_COLL_BROADCAST || op == FB_COLL_REDUCE) FB_TRY(check_root(c, op, root));
  const coll_call a = {op, send, recv, count, t, root, 0};
  return issue(c, s, &a);
}

bool fb_comm_launched(const char *name) {
  return name && (!strcmp(name, "mpi") || !strcmp(name, "nccl"));
}

bool fb_comm_own_device(const char *name) { return name && !strcmp(name, "nccl"); }

fb_status fb_comm_group_start(fb_comm *c) {
  return c->ops->group_start ? c->ops->group_start(c) : FB_OK;
}

fb_status fb_comm_group_end(fb_comm *c) {
  return c->ops->group_end ? c->ops->group_end(c) : FB_OK;
}

fb_status fb_barrier(fb_comm *c, fb_stream *s) {
  FB_TRY(check_args(c, s, FB_COLL_BARRIER, NULL, false, NULL, false, 0, FB_F32));
  const coll_call a = {FB_COLL_BARRIER, NULL, NULL, 0, FB_F32, 0, 0};
  return recorded(c, s, -1, &a);
}
