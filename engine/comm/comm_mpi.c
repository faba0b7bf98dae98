/* The MPI communicator: ranks are processes (any number of machines). Each collective runs as
 * a host task on the stream it was issued on: it posts the non-blocking MPI collective
 * (MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Iallreduce, MPI_Ibcast, MPI_Ireduce,
 * MPI_Ibarrier) on a private duplicate of MPI_COMM_WORLD and polls MPI_Test until it completes
 * or the communicator's timeout passes (FB_ETIMEOUT naming the rank and the collective).
 * bf16 sums go through fp32 staging buffers (one rounding at the end); u64 sums are exact.
 * The reduction order is MPI's, so fp32/fp64 sums are not guaranteed bitwise equal to the
 * local communicator's rank-order sums. Failures come back as statuses (MPI_ERRORS_RETURN on
 * the private communicators) so the caller ends the job through fb_mpi_fail (MPI_Abort, exit code 4):
 * a timed-out rank first probes its peers (every rank that timed out too answers on a second
 * private communicator within a grace period) to name the ranks that did not arrive; the
 * lowest rank that answered reports, the others wait for its abort, so the job prints one
 * line. A communicator that failed is never used or freed again (MPI may still own its
 * requests). Groups (fb_comm_split) are MPI_Comm_split of the private communicator, called on
 * the host thread. Built only with MPI. */
#define _GNU_SOURCE
#include "comm.h"
#include "host_queue.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../backends/cpu/device_cpu.h"

typedef struct mpi_comm {
  MPI_Comm comm;
  MPI_Comm probe;     /* the liveness probe after a timeout (probe_peers) */
  bool broken;        /* a collective failed or timed out: requests may still be in flight */
  uint64_t probe_out; /* what this rank sends in the probe; lives as long as the process */
  fb_host_queue q;    /* queued collectives (host_queue.h) */
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

int fb_mpi_fail(int code) {
  int inited = 0, finalized = 0, world = 1;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized) return code;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world == 1) {
    MPI_Finalize();
    return code;
  }
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code); /* not reached */
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

static void describe(const fb_host_job *a, char *buf, size_t n) {
  const fb_coll_call *k = &a->call;
  const unsigned long long seq = (unsigned long long)a->seq;
  if (k->op == FB_COLL_BARRIER)
    snprintf(buf, n, "barrier #%llu", seq);
  else if (k->op == FB_COLL_BROADCAST || k->op == FB_COLL_REDUCE)
    snprintf(buf, n, "%s #%llu (count %zu, %s, root %d)", fb_coll_name(k->op), seq, k->count,
             fb_dtype_name(k->t), k->root);
  else
    snprintf(buf, n, "%s #%llu (count %zu, %s)", fb_coll_name(k->op), seq, k->count,
             fb_dtype_name(k->t));
}

static MPI_Datatype mpi_type(fb_dtype t) {
  switch (t) {
  case FB_F32: return MPI_FLOAT;
  case FB_F64: return MPI_DOUBLE;
  case FB_U64: return MPI_UINT64_T;
  case FB_BF16: return MPI_UINT16_T; /* moved as raw bits; reduced through fp32 staging */
  case FB_I8: return MPI_INT8_T;     /* quantised bytes: moved only */
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

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

#define PROBE_TAG 7411
#define PROBE_GRACE_S 2.0 /* how far apart in time the ranks may time out and still meet */

/* After a timeout on c: every rank that timed out sends its collective's number to every
 * other one on m->probe and listens for PROBE_GRACE_S (at most the timeout); answered[j] says
 * whether rank j was heard from (alive and stuck in the same way). The sends to ranks that
 * never listen stay pending: the job is about to abort. */
static void probe_peers(fb_comm *c, const fb_host_job *a, bool *answered) {
  mpi_comm *m = c->impl;
  const int W = c->world;
  uint64_t *in = calloc((size_t)W, sizeof *in);
  MPI_Request *rq = calloc((size_t)W, sizeof *rq);
  if (!in || !rq) goto out;
  m->probe_out = a->seq;
  for (int j = 0; j < W; j++) {
    answered[j] = j == c->rank;
    rq[j] = MPI_REQUEST_NULL;
    if (j == c->rank) continue;
    MPI_Request sreq;
    if (MPI_Isend(&m->probe_out, 1, MPI_UINT64_T, j, PROBE_TAG, m->probe, &sreq) == MPI_SUCCESS)
      MPI_Request_free(&sreq);
    MPI_Irecv(&in[j], 1, MPI_UINT64_T, j, PROBE_TAG, m->probe, &rq[j]);
  }
  const double grace = c->timeout_s < PROBE_GRACE_S ? c->timeout_s : PROBE_GRACE_S;
  const double t0 = mono_s();
  int left = W - 1;
  while (left > 0 && mono_s() - t0 < grace) {
    for (int j = 0; j < W; j++) {
      int done = 0;
      if (rq[j] == MPI_REQUEST_NULL || MPI_Test(&rq[j], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
          !done)
        continue;
      answered[j] = true;
      left--;
    }
    sleep_s(0.002);
  }
out:
  free(in); /* a receive still pending never completes: the job aborts */
  free(rq);
}

/* c's rank j as a rank of MPI_COMM_WORLD (what mpirun and the logs number). */
static int world_rank(fb_comm *c, int j) {
  mpi_comm *m = c->impl;
  MPI_Group g, wg;
  int out = j;
  MPI_Comm_group(m->comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &wg);
  MPI_Group_translate_ranks(g, 1, &j, wg, &out);
  MPI_Group_free(&g);
  MPI_Group_free(&wg);
  return out;
}

/* The timeout of collective `a` on this rank: probes the peers, then the lowest rank that
 * answered returns the one line naming the ranks that did not arrive; the others wait a while
 * for its abort (so the job prints one line) before failing the same way. */
static fb_status timed_out(fb_comm *c, const fb_host_job *a, double waited) {
  const int W = c->world, me = world_rank(c, c->rank);
  char what[128], missing[256] = "";
  describe(a, what, sizeof what);
  bool *answered = calloc((size_t)W, sizeof *answered);
  if (!answered)
    return FB_ERR(FB_ETIMEOUT, "%s did not complete within %g s on rank %d: a peer rank failed "
                  "or is stuck", what, c->timeout_s, me);
  probe_peers(c, a, answered);
  int nmiss = 0, lowest = c->rank;
  size_t used = 0;
  for (int j = W - 1; j >= 0; j--)
    if (answered[j]) lowest = j;
  for (int j = 0; j < W && used < sizeof missing; j++)
    if (!answered[j])
      used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                               nmiss++ ? ", " : "", world_rank(c, j));
  free(answered);
  if (lowest != c->rank) sleep_s(PROBE_GRACE_S + 5.0); /* the reporter aborts the job */
  if (nmiss == 0)
    return FB_ERR(FB_ETIMEOUT, "%s did not complete within %g s on rank %d although every rank "
                  "answered a liveness probe (mismatched collectives?)", what, c->timeout_s, me);
  return FB_ERR(FB_ETIMEOUT, "rank%s %s did not reach %s within %g s (rank %d waited %.1f s): %s",
                nmiss > 1 ? "s" : "", missing, what, c->timeout_s, me, waited,
                nmiss > 1 ? "they failed or are stuck" : "it failed or is stuck");
}

/* Polls req until done or the timeout; backs off from yielding to short sleeps so waiting
 * ranks leave the cores to the ones computing. */
static fb_status wait_req(fb_comm *c, MPI_Request *req, const fb_host_job *a) {
  mpi_comm *m = c->impl;
  const double t0 = mono_s();
  long sleep_ns = 10000;
  for (int it = 0;; it++) {
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char what[128], err[MPI_MAX_ERROR_STRING];
      int len = 0;
      m->broken = true;
      describe(a, what, sizeof what);
      MPI_Error_string(rc, err, &len);
      return FB_ERR(FB_ECOMM, "rank %d: %s failed: %s (a peer rank failed; mpirun names it "
                    "above)", world_rank(c, c->rank), what, err);
    }
    if (done) return FB_OK;
    const double waited = mono_s() - t0;
    if (c->timeout_s > 0 && waited > c->timeout_s) {
      m->broken = true;
      return timed_out(c, a, waited);
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

static fb_status collective(fb_comm *c, const fb_host_job *a) {
  mpi_comm *m = c->impl;
  const fb_coll_call *k = &a->call;
  const size_t n = k->count, es = fb_dtype_size(k->t);
  const int r = c->rank, W = c->world;
  const MPI_Datatype dt = mpi_type(k->t);
  const bool bf = k->t == FB_BF16;
  if (m->broken) {
    char what[128];
    describe(a, what, sizeof what);
    return FB_ERR(FB_ECOMM, "rank %d: %s not started: an earlier collective on this "
                  "communicator failed", r, what);
  }
  if (k->op != FB_COLL_BARRIER && n == 0) return FB_OK; /* every rank skips it alike */
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

  switch (k->op) {
  case FB_COLL_ALL_GATHER: {
    const bool inplace = k->send == (const char *)k->recv + (size_t)r * n * es;
    rc = MPI_Iallgather(inplace ? MPI_IN_PLACE : k->send, cnt, dt, k->recv, cnt, dt, m->comm,
                        &req);
    if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    break;
  }
  case FB_COLL_REDUCE_SCATTER: {
    /* MPI's in-place reduce-scatter writes the result at the start of the buffer, ours at
     * rank*count: reduce into a temporary, then copy */
    const bool inplace = k->recv == (const char *)k->send + (size_t)r * n * es;
    if (bf) {
      s32 = stage_from_bf16(k->send, n * (size_t)W);
      r32 = malloc(n * sizeof *r32);
      if (!s32 || !r32) goto oom;
      rc = MPI_Ireduce_scatter_block(s32, r32, cnt, MPI_FLOAT, MPI_SUM, m->comm, &req);
      if (rc == MPI_SUCCESS && (st = wait_req(c, &req, a)) == FB_OK) unstage_to_bf16(k->recv, r32, n);
    } else {
      void *out = k->recv;
      if (inplace && !(out = tmp = malloc(n * es))) goto oom;
      rc = MPI_Ireduce_scatter_block(k->send, out, cnt, dt, MPI_SUM, m->comm, &req);
      if (rc == MPI_SUCCESS && (st = wait_req(c, &req, a)) == FB_OK && inplace)
        memcpy(k->recv, tmp, n * es);
    }
    break;
  }
  case FB_COLL_ALL_REDUCE:
    if (bf) {
      if (!(s32 = stage_from_bf16(k->send, n))) goto oom;
      rc = MPI_Iallreduce(MPI_IN_PLACE, s32, cnt, MPI_FLOAT, MPI_SUM, m->comm, &req);
      if (rc == MPI_SUCCESS && (st = wait_req(c, &req, a)) == FB_OK) unstage_to_bf16(k->recv, s32, n);
    } else {
      rc = MPI_Iallreduce(k->send == k->recv ? MPI_IN_PLACE : k->send, k->recv, cnt, dt, MPI_SUM,
                          m->comm, &req);
      if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    }
    break;
  case FB_COLL_BROADCAST:
    rc = MPI_Ibcast(k->recv, cnt, dt, k->root, m->comm, &req);
    if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    break;
  case FB_COLL_REDUCE:
    if (bf) {
      if (!(s32 = stage_from_bf16(k->send, n))) goto oom;
      if (r == k->root && !(r32 = malloc(n * sizeof *r32))) goto oom;
      rc = MPI_Ireduce(s32, r32, cnt, MPI_FLOAT, MPI_SUM, k->root, m->comm, &req);
      if (rc == MPI_SUCCESS && (st = wait_req(c, &req, a)) == FB_OK && r == k->root)
        unstage_to_bf16(k->recv, r32, n);
    } else {
      const bool inplace = r == k->root && k->send == k->recv;
      rc = MPI_Ireduce(inplace ? MPI_IN_PLACE : k->send, k->recv, cnt, dt, MPI_SUM, k->root,
                       m->comm, &req);
      if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    }
    break;
  case FB_COLL_ALL_TO_ALL:
    rc = MPI_Ialltoall(k->send, cnt, dt, k->recv, cnt, dt, m->comm, &req);
    if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    break;
  case FB_COLL_BARRIER:
    rc = MPI_Ibarrier(m->comm, &req);
    if (rc == MPI_SUCCESS) st = wait_req(c, &req, a);
    break;
  case FB_NCOLL: st = FB_ERR(FB_EINTERNAL, "mpi comm: unknown collective %d", (int)k->op); break;
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

static fb_status m_issue(fb_comm *c, fb_stream *s, const fb_coll_call *call) {
  mpi_comm *m = c->impl;
  return fb_host_queue_issue(&m->q, c, s, call);
}

/* The streams this comm used must be drained before it is destroyed; every rank destroys its
 * communicator (MPI_Comm_free is collective). A broken one (a collective failed) is left to
 * MPI, and its probe buffer with it: the job is about to abort. */
static void m_destroy(fb_comm *c) {
  mpi_comm *m = c->impl;
  fb_host_queue_fini(&m->q);
  if (m->broken) {
    free(c);
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    MPI_Comm_free(&m->probe);
    MPI_Comm_free(&m->comm);
  }
  free(m);
  free(c);
}

static fb_status m_split(fb_comm *c, int color, int key, int size, fb_comm **out);

const fb_comm_ops fb_mpi_comm_ops = {
    .name = "mpi",
    .issue = m_issue,
    .split = m_split,
    .destroy = m_destroy,
    .host_memory = true,
};

/* Wraps an MPI communicator this fb_comm then owns (freed on failure too); errors on it come
 * back as return codes. Collective over mc (the probe communicator is a duplicate). */
static fb_status wrap(fb_device *dev, MPI_Comm mc, double timeout_s, fb_comm **out) {
  int rank = 0, world = 1;
  MPI_Comm_rank(mc, &rank);
  MPI_Comm_size(mc, &world);
  MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
  MPI_Comm probe = MPI_COMM_NULL;
  if (MPI_Comm_dup(mc, &probe) != MPI_SUCCESS) {
    MPI_Comm_free(&mc);
    return FB_ERR(FB_ECOMM, "rank %d: mpi comm: MPI_Comm_dup failed", rank);
  }
  fb_comm *c = calloc(1, sizeof *c);
  mpi_comm *m = calloc(1, sizeof *m);
  if (!c || !m || fb_host_queue_init(&m->q, "mpi comm", collective) != FB_OK) {
    free(m);
    free(c);
    MPI_Comm_free(&probe);
    MPI_Comm_free(&mc);
    return FB_ERR(FB_ENOMEM, "rank %d: mpi comm: out of host memory", rank);
  }
  m->comm = mc;
  m->probe = probe;
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
