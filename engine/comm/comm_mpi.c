/* The MPI communicator: ranks are processes (any number of machines). Each collective runs as
 * a host task on the stream it was issued on: it posts the non-blocking MPI collective
 * (MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Iallreduce, MPI_Ibcast, MPI_Ireduce,
 * MPI_Ibarrier) on a private duplicate of MPI_COMM_WORLD and polls MPI_Test until it completes
 * or the communicator's timeout passes (FB_ETIMEOUT naming the rank and the collective).
 * bf16 sums go through fp32 staging buffers (one rounding at the end); u64 sums are exact.
 * The reduction order is MPI's, so fp32/fp64 sums are not guaranteed bitwise equal to the
 * local communicator's rank-order sums. A dead peer ends the job through Open MPI's default
 * error handler (MPI_ERRORS_ARE_FATAL), which is kept on purpose. Groups (fb_comm_split) are
 * MPI_Comm_split of the private communicator, called on the host thread. Built only with MPI. */
#define _GNU_SOURCE
#include "comm.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../device/device_cpu.h"

typedef struct coll_args {
  fb_coll op;
  size_t count;
  fb_dtype t;
  int root;
  const void *send;
  void *recv;
  uint64_t seq;
} coll_args;

typedef struct job {
  struct job *prev, *next;
  fb_comm *c;
  coll_args a;
} job;

typedef struct mpi_comm {
  MPI_Comm comm;
  uint64_t seq;
  pthread_mutex_t mu; /* guards pending */
  job *pending;       /* queued collectives (see comm_local.c: freed at destroy if skipped) */
} mpi_comm;

/* ---- init ------------------------------------------------------------------------------- */

static const char *thread_level_name(int l) {
  switch (l) {
  case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
  case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
  case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
  case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

fb_status fb_mpi_init(int *argc, char ***argv, int *rank, int *world) {
  int inited = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&inited);
  if (!inited) {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return FB_ERR(FB_ECOMM, "mpi: MPI_Init_thread failed");
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE)
    return FB_ERR(FB_ECOMM, "mpi: the MPI library provides %s, fsdpbench needs "
                  "MPI_THREAD_MULTIPLE (collectives run on the comm stream's thread)",
                  thread_level_name(provided));
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, world);
  /* start every process's clock together so the per-rank traces line up */
  MPI_Barrier(MPI_COMM_WORLD);
  fb_cpu_clock_align();
  return FB_OK;
}

void fb_mpi_finalize(void) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Finalize();
}

/* ---- helpers ---------------------------------------------------------------------------- */

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void describe(const coll_args *a, char *buf, size_t n) {
  if (a->op == FB_COLL_BARRIER)
    snprintf(buf, n, "barrier #%llu", (unsigned long long)a->seq);
  else if (a->op == FB_COLL_BROADCAST || a->op == FB_COLL_REDUCE)
    snprintf(buf, n, "%s #%llu (count %zu, %s, root %d)", fb_coll_name(a->op),
             (unsigned long long)a->seq, a->count, fb_dtype_name(a->t), a->root);
  else
    snprintf(buf, n, "%s #%llu (count %zu, %s)", fb_coll_name(a->op), (unsigned long long)a->seq,
             a->count, fb_dtype_name(a->t));
}

static MPI_Datatype mpi_type(fb_dtype t) {
  switch (t) {
  case FB_F32: return MPI_FLOAT;
  case FB_F64: return MPI_DOUBLE;
  case FB_U64: return MPI_UINT64_T;
  case FB_BF16: return MPI_UINT16_T; /* moved as raw bits; reduced through fp32 staging */
  default: break;
  }
  return MPI_DATATYPE_NULL;
}

static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
  return (uint16_t)(u >> 16);
}

static float *stage_from_bf16(const void *src, size_t n) {
  float *f = malloc((n ? n : 1) * sizeof *f);
  if (f)
    for (size_t i = 0; i < n; i++) f[i] = bf16_to_f32(((const uint16_t *)src)[i]);
  return f;
}

static void unstage_to_bf16(void *dst, const float *f, size_t n) {
  for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = f32_to_bf16(f[i]);
}

/* Polls req until done or the timeout; backs off from yielding to short sleeps so waiting
 * ranks leave the cores to the ones computing. */
static fb_status wait_req(fb_comm *c, MPI_Request *req, const coll_args *a) {
  const double t0 = mono_s();
  long sleep_ns = 10000;
  for (int it = 0;; it++) {
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      char what[128];
      describe(a, what, sizeof what);
      return FB_ERR(FB_ECOMM, "rank %d: %s failed in MPI_Test", c->rank, what);
    }
    if (done) return FB_OK;
    const double waited = mono_s() - t0;
    if (c->timeout_s > 0 && waited > c->timeout_s) {
      char what[128];
      describe(a, what, sizeof what);
      return FB_ERR(FB_ETIMEOUT, "rank %d: %s waited %.1f s and did not complete (a peer did "
                    "not issue it, or is stuck)", c->rank, what, waited);
    }
    if (it < 64) {
      sched_yield();
    } else {
      struct timespec ts = {0, sleep_ns};
      nanosleep(&ts, NULL);
      if (sleep_ns < 500000) sleep_ns *= 2;
    }
  }
}

/* ---- one collective ---------------------------------------------------------------------- */

static fb_status collective(fb_comm *c, const coll_args *a) {
  mpi_comm *m = c->impl;
  const size_t n = a->count, es = fb_dtype_size(a->t);
  const int r = c->rank, W = c->world;
  const MPI_Datatype dt = mpi_type(a->t);
  const bool bf = a->t == FB_BF16;
  if (a->op != FB_COLL_BARRIER && n == 0) return FB_OK; /* every rank skips it alike */
  if (n > (size_t)INT_MAX / (size_t)W) {
    char what[128];
    describe(a, what, sizeof what);
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: %s: count exceeds MPI's int counts", r, what);
  }
  const int cnt = (int)n;
  MPI_Request req = MPI_REQUEST_NULL;
  float *s32 = NULL, *r32 = NULL; /* bf16 staging */
  void *tmp = NULL;               /* in-place reduce-scatter */
  fb_status st = FB_OK;
  int rc = MPI_SUCCESS;

  switch (a->op) {
  case FB_COLL_ALL_GATHER: {
    const bool inplace = a->send == (const char *)a->recv + (size_t)r * n * es;
    rc = MPI_Iallgather(inplace ? MPI_IN_PLACE : a->send, cnt, dt, a->recv, cnt, dt, m->comm,
                        &req);
    if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    break;
  }
  case FB_COLL_REDUCE_SCATTER: {
    /* MPI's in-place reduce-scatter writes the result at the start of the buffer, ours at
     * rank*count: reduce into a temporary, then copy */
    const bool inplace = a->recv == (const char *)a->send + (size_t)r * n * es;
    if (bf) {
      s32 = stage_from_bf16(a->send, n * (size_t)W);
      r32 = malloc(n * sizeof *r32);
      if (!s32 || !r32) goto oom;
      rc = MPI_Ireduce_scatter_block(s32, r32, cnt, MPI_FLOAT, MPI_SUM, m->comm, &req);
      if (rc == MPI_SUCCESS && (st = wait_req(c, &req, a)) == FB_OK) unstage_to_bf16(a->recv, r32, n);
    } else {
      void *out = a->recv;
      if (inplace && !(out = tmp = malloc(n * es))) goto oom;
      rc = MPI_Ireduce_scatter_block(a->send, out, cnt, dt, MPI_SUM, m->comm, &req);
      if (rc == MPI_SUCCESS && (st = wait_req(c, &req, a)) == FB_OK && inplace)
        memcpy(a->recv, tmp, n * es);
    }
    break;
  }
  case FB_COLL_ALL_REDUCE:
    if (bf) {
      if (!(s32 = stage_from_bf16(a->send, n))) goto oom;
      rc = MPI_Iallreduce(MPI_IN_PLACE, s32, cnt, MPI_FLOAT, MPI_SUM, m->comm, &req);
      if (rc == MPI_SUCCESS && (st = wait_req(c, &req, a)) == FB_OK) unstage_to_bf16(a->recv, s32, n);
    } else {
      rc = MPI_Iallreduce(a->send == a->recv ? MPI_IN_PLACE : a->send, a->recv, cnt, dt, MPI_SUM,
                          m->comm, &req);
      if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    }
    break;
  case FB_COLL_BROADCAST:
    rc = MPI_Ibcast(a->recv, cnt, dt, a->root, m->comm, &req);
    if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    break;
  case FB_COLL_REDUCE:
    if (bf) {
      if (!(s32 = stage_from_bf16(a->send, n))) goto oom;
      if (r == a->root && !(r32 = malloc(n * sizeof *r32))) goto oom;
      rc = MPI_Ireduce(s32, r32, cnt, MPI_FLOAT, MPI_SUM, a->root, m->comm, &req);
      if (rc == MPI_SUCCESS && (st = wait_req(c, &req, a)) == FB_OK && r == a->root)
        unstage_to_bf16(a->recv, r32, n);
    } else {
      const bool inplace = r == a->root && a->send == a->recv;
      rc = MPI_Ireduce(inplace ? MPI_IN_PLACE : a->send, a->recv, cnt, dt, MPI_SUM, a->root,
                       m->comm, &req);
      if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    }
    break;
  case FB_COLL_BARRIER:
    rc = MPI_Ibarrier(m->comm, &req);
    if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    break;
  case FB_NCOLL: st = FB_ERR(FB_EINTERNAL, "mpi comm: unknown collective %d", (int)a->op); break;
  }
  if (rc != MPI_SUCCESS) {
    char what[128], err[MPI_MAX_ERROR_STRING];
    int len = 0;
    describe(a, what, sizeof what);
    MPI_Error_string(rc, err, &len);
    st = FB_ERR(FB_ECOMM, "rank %d: %s could not be started: %s", r, what, err);
  }
  free(s32);
  free(r32);
  free(tmp);
  return st;

oom:
  free(s32);
  free(r32);
  free(tmp);
  return FB_ERR(FB_ENOMEM, "rank %d: mpi comm: out of host memory for staging %zu elements", r, n);
}

/* ---- issuing on a stream ---------------------------------------------------------------- */

static fb_status run_job(void *arg) {
  job *j = arg;
  mpi_comm *m = j->c->impl;
  fb_status st = collective(j->c, &j->a);
  pthread_mutex_lock(&m->mu);
  if (j->prev) j->prev->next = j->next;
  else m->pending = j->next;
  if (j->next) j->next->prev = j->prev;
  pthread_mutex_unlock(&m->mu);
  free(j);
  return st;
}

static fb_status issue(fb_comm *c, fb_stream *s, fb_coll op, const void *send, void *recv,
                       size_t count, fb_dtype t, int root) {
  mpi_comm *m = c->impl;
  fb_device *d = c->dev;
  if (!d->ops->host_task)
    return FB_ERR(FB_EUNSUPPORTED, "mpi comm: device '%s' cannot run host tasks", d->ops->name);
  if (mpi_type(t) == MPI_DATATYPE_NULL)
    return FB_ERR(FB_EUNSUPPORTED, "mpi comm: dtype %s is not supported (allowed: fp32, fp64, "
                  "u64, bf16)", fb_dtype_name(t));
  job *j = calloc(1, sizeof *j);
  if (!j) return FB_ERR(FB_ENOMEM, "mpi comm: out of host memory");
  j->c = c;
  j->a = (coll_args){.op = op, .count = count, .t = t, .root = root, .send = send,
                     .recv = recv, .seq = ++m->seq};
  pthread_mutex_lock(&m->mu);
  j->next = m->pending;
  if (m->pending) m->pending->prev = j;
  m->pending = j;
  pthread_mutex_unlock(&m->mu);
  return d->ops->host_task(d, s, run_job, j);
}

static fb_status m_all_gather(fb_comm *c, fb_stream *s, const void *send, void *recv,
                              size_t count, fb_dtype t) {
  return issue(c, s, FB_COLL_ALL_GATHER, send, recv, count, t, 0);
}
static fb_status m_reduce_scatter(fb_comm *c, fb_stream *s, const void *send, void *recv,
                                  size_t count, fb_dtype t) {
  return issue(c, s, FB_COLL_REDUCE_SCATTER, send, recv, count, t, 0);
}
static fb_status m_all_reduce(fb_comm *c, fb_stream *s, const void *send, void *recv,
                              size_t count, fb_dtype t) {
  return issue(c, s, FB_COLL_ALL_REDUCE, send, recv, count, t, 0);
}
static fb_status m_broadcast(fb_comm *c, fb_stream *s, void *buf, size_t count, fb_dtype t,
                             int root) {
  return issue(c, s, FB_COLL_BROADCAST, buf, buf, count, t, root);
}
static fb_status m_reduce(fb_comm *c, fb_stream *s, const void *send, void *recv, size_t count,
                          fb_dtype t, int root) {
  return issue(c, s, FB_COLL_REDUCE, send, recv, count, t, root);
}
static fb_status m_barrier(fb_comm *c, fb_stream *s) {
  return issue(c, s, FB_COLL_BARRIER, NULL, NULL, 0, FB_F32, 0);
}

/* The streams this comm used must be drained before it is destroyed; every rank destroys its
 * communicator (MPI_Comm_free is collective). */
static void m_destroy(fb_comm *c) {
  mpi_comm *m = c->impl;
  for (job *j = m->pending, *nx; j; j = nx) {
    nx = j->next;
    free(j);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&m->comm);
  pthread_mutex_destroy(&m->mu);
  free(m);
  free(c);
}

static fb_status m_split(fb_comm *c, int color, int key, int size, fb_comm **out);

const fb_comm_ops fb_mpi_comm_ops = {
    .name = "mpi",
    .all_gather = m_all_gather,
    .reduce_scatter = m_reduce_scatter,
    .all_reduce = m_all_reduce,
    .broadcast = m_broadcast,
    .reduce = m_reduce,
    .barrier = m_barrier,
    .split = m_split,
    .destroy = m_destroy,
    .host_memory = true,
};

/* Wraps an MPI communicator this fb_comm then owns (freed on failure too). */
static fb_status wrap(fb_device *dev, MPI_Comm mc, double timeout_s, fb_comm **out) {
  int rank = 0, world = 1;
  MPI_Comm_rank(mc, &rank);
  MPI_Comm_size(mc, &world);
  fb_comm *c = calloc(1, sizeof *c);
  mpi_comm *m = calloc(1, sizeof *m);
  if (!c || !m || pthread_mutex_init(&m->mu, NULL) != 0) {
    free(m);
    free(c);
    MPI_Comm_free(&mc);
    return FB_ERR(FB_ENOMEM, "rank %d: mpi comm: out of host memory", rank);
  }
  m->comm = mc;
  *c = (fb_comm){.ops = &fb_mpi_comm_ops, .impl = m, .rank = rank, .world = world, .dev = dev,
                 .timeout_s = timeout_s};
  *out = c;
  return FB_OK;
}

static fb_status m_split(fb_comm *c, int color, int key, int size, fb_comm **out) {
  (void)size;
  mpi_comm *m = c->impl;
  MPI_Comm sub = MPI_COMM_NULL;
  if (MPI_Comm_split(m->comm, color, key, &sub) != MPI_SUCCESS || sub == MPI_COMM_NULL)
    return FB_ERR(FB_ECOMM, "rank %d: mpi comm: MPI_Comm_split (color %d, key %d) failed",
                  c->rank, color, key);
  return wrap(c->dev, sub, c->timeout_s, out);
}

fb_status fb_comm_mpi_create(fb_device *dev, double timeout_s, fb_comm **out) {
  *out = NULL;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return FB_ERR(FB_EINTERNAL, "mpi comm: fb_mpi_init has not run");
  if (!dev) return FB_ERR(FB_EINTERNAL, "mpi comm: a device is required");
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (dev->rank != rank || dev->world != world)
    return FB_ERR(FB_EINTERNAL, "mpi comm: device is rank %d of %d but MPI says rank %d of %d",
                  dev->rank, dev->world, rank, world);
  MPI_Comm dup = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS)
    return FB_ERR(FB_ECOMM, "rank %d: mpi comm: MPI_Comm_dup failed", rank);
  return wrap(dev, dup, timeout_s, out);
}
