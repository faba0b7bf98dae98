/* The local communicator on real cpu devices (one thread + device per rank): every collective
 * for W in {1,2,3,4,8} and counts {0,1,2,7,13,1000,1031}, fp32/fp64/u64/bf16, in-place variants,
 * exact expected values (fp32/fp64 sums bitwise equal to the rank-order sequential sum, with
 * values whose sum depends on the order), collectives queued ahead, a timeout (one rank skips)
 * and a mismatch. It does not test the MPI communicator (test_mpi_comm). */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "engine/comm/comm.h"
#include "engine/backends/cpu/device_cpu.h"
#include "engine/device/recorder.h"

/* ---- values and their exact sums ----------------------------------------------------------- */

typedef union val {
  float f;
  double d;
  uint64_t u;
  uint16_t h;
  unsigned char b[8];
} val;

static float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Reference fp32 -> bf16, round to nearest even, through frexp/nearbyint (independent of the
 * bit trick the communicator uses). Finite inputs only. */
static uint16_t ref_bf16(float f) {
  float r = 0.0f;
  if (f != 0.0f) {
    int e;
    double m = frexp((double)f, &e);
    r = (float)ldexp(nearbyint(ldexp(m, 8)), e - 8);
  }
  uint32_t u;
  memcpy(&u, &r, 4);
  return (uint16_t)(u >> 16);
}

static val value(fb_dtype t, int r, size_t i) {
  val v;
  memset(&v, 0, sizeof v);
  const int k = (int)(i % 1009);
  switch (t) {
  case FB_F32: /* mixes 1e8-scale and O(1) values: the rounding of the sum depends on the order */
    v.f = ((float)((r * 7 + k * 3) % 11) - 5.0f) * (((r + k) & 1) ? 1e8f : 1.0f) + 0.1f * (float)r +
          1e-3f * (float)(k % 7);
    break;
  case FB_F64:
    v.d = ((double)((r * 5 + k * 3) % 13) - 6.0) * (((r + k) & 1) ? 1e17 : 1.0) + 0.1 * r +
          1e-3 * (k % 7);
    break;
  case FB_U64:
    v.u = ((uint64_t)r + 1) * 0x9E3779B97F4A7C15ull * ((uint64_t)i + 1) ^ ((uint64_t)i << 40);
    break;
  case FB_BF16: /* 1 + j/128: exact in bf16; their sums need rounding back to 8 bits */
    v.h = ref_bf16(1.0f + (float)((r * 5 + k * 3) % 128) / 128.0f);
    break;
  default: break;
  }
  return v;
}

static val sum_in_order(fb_dtype t, int W, size_t i) {
  val a = value(t, 0, i);
  float fb = bf2f(a.h);
  for (int r = 1; r < W; r++) {
    val x = value(t, r, i);
    switch (t) {
    case FB_F32: a.f += x.f; break;
    case FB_F64: a.d += x.d; break;
    case FB_U64: a.u += x.u; break;
    case FB_BF16: fb += bf2f(x.h); break;
    default: break;
    }
  }
  if (t == FB_BF16) a.h = ref_bf16(fb);
  return a;
}

static val sum_reversed(fb_dtype t, int W, size_t i) {
  val a = value(t, W - 1, i);
  for (int r = W - 2; r >= 0; r--) {
    val x = value(t, r, i);
    if (t == FB_F32) a.f += x.f;
    if (t == FB_F64) a.d += x.d;
  }
  return a;
}

/* ---- per-rank harness ---------------------------------------------------------------------- */

typedef struct rank_ctx {
  int r, W;
  fb_local_group *g;
  fb_device *dev;
  fb_comm *c;
  fb_stream *comp, *comm;
  int checks, fails;
  double timeout_elapsed;
} rank_ctx;

static void rcheck(rank_ctx *rc, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rcheck(rank_ctx *rc, int ok, const char *fmt, ...) {
  rc->checks++;
  if (ok) return;
  if (rc->fails++ < 8) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "W=%d rank %d: ", rc->W, rc->r);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
}

#define RCHECK_OK(rc, expr)                                                                     \
  do {                                                                                          \
    fb_status st_ = (expr);                                                                     \
    rcheck((rc), st_ == FB_OK, "%s -> %s: %s", #expr, fb_status_name(st_), fb_error_msg());    \
  } while (0)

static fb_status rank_open(rank_ctx *rc) {
  FB_TRY(fb_device_open(&fb_cpu_device_ops, rc->r, rc->W, 1, 0, NULL, &rc->dev));
  FB_TRY(rc->dev->ops->stream_create(rc->dev, FB_STREAM_COMPUTE, &rc->comp));
  FB_TRY(rc->dev->ops->stream_create(rc->dev, FB_STREAM_COMM, &rc->comm));
  return fb_comm_local_create(rc->g, rc->r, rc->dev, &rc->c);
}

static void rank_close(rank_ctx *rc) {
  if (rc->comm) (void)fb_stream_sync(rc->dev, rc->comm);
  fb_comm_destroy(rc->c);
  if (rc->comm) rc->dev->ops->stream_destroy(rc->dev, rc->comm);
  if (rc->comp) rc->dev->ops->stream_destroy(rc->dev, rc->comp);
  fb_device_close(rc->dev);
}

/* Device buffer of n elements; host image filled with value(t, owner, first + i) or 0xAB. */
typedef struct dbuf {
  fb_buf b;
  size_t n;
} dbuf;

static void dalloc(rank_ctx *rc, dbuf *d, fb_dtype t, size_t n) {
  d->n = n;
  RCHECK_OK(rc, fb_alloc(rc->dev, n * fb_dtype_size(t), FB_MEM_COMM, "test.comm", &d->b));
  if (n) {
    unsigned char *junk = malloc(n * fb_dtype_size(t));
    memset(junk, 0xAB, n * fb_dtype_size(t));
    RCHECK_OK(rc, fb_copy_h2d(rc->dev, rc->comp, d->b.ptr, junk, n * fb_dtype_size(t)));
    free(junk);
  }
}

/* Writes value(t, owner, vfirst + i) into elements [at, at + n). */
static void dfill(rank_ctx *rc, dbuf *d, fb_dtype t, size_t at, size_t n, int owner, size_t vfirst) {
  if (!n) return;
  const size_t es = fb_dtype_size(t);
  unsigned char *h = malloc(n * es);
  for (size_t i = 0; i < n; i++) {
    val v = value(t, owner, vfirst + i);
    memcpy(h + i * es, v.b, es);
  }
  RCHECK_OK(rc, fb_copy_h2d(rc->dev, rc->comp, (char *)d->b.ptr + at * es, h, n * es));
  free(h);
}

typedef enum expect_kind { E_VALUE, E_SUM } expect_kind;

/* Elements [at, at + n) must equal value(t, owner, vfirst + i) or the rank-order sum at
 * vfirst + i, bitwise. Reads back through the stream s (waits for it). */
static void dexpect(rank_ctx *rc, fb_stream *s, const dbuf *d, fb_dtype t, size_t at, size_t n,
                    expect_kind k, int owner, size_t vfirst, const char *what) {
  if (!n) return;
  const size_t es = fb_dtype_size(t);
  unsigned char *h = malloc(n * es);
  fb_status st = fb_copy_d2h(rc->dev, s, h, (const char *)d->b.ptr + at * es, n * es);
  rcheck(rc, st == FB_OK, "%s: read back: %s %s", what, fb_status_name(st), fb_error_msg());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n && st == FB_OK; i++) {
    val v = k == E_VALUE ? value(t, owner, vfirst + i) : sum_in_order(t, rc->W, vfirst + i);
    if (memcmp(h + i * es, v.b, es)) {
      if (!bad) first = i;
      bad++;
    }
  }
  rcheck(rc, bad == 0, "%s %s count %zu: %zu of %zu elements wrong (first at %zu)", what,
         fb_dtype_name(t), d->n, bad, n, first);
  free(h);
}

static void dfree(rank_ctx *rc, dbuf *d) { fb_free(rc->dev, &d->b, NULL); }

static const size_t COUNTS[] = {0, 1, 2, 7, 13, 1000, 1031};
static const fb_dtype TYPES[] = {FB_F32, FB_F64, FB_U64, FB_BF16};

static void run_cases(rank_ctx *rc) {
  const int r = rc->r, W = rc->W;
  for (size_t ti = 0; ti < sizeof TYPES / sizeof *TYPES; ti++) {
    const fb_dtype t = TYPES[ti];
    const size_t es = fb_dtype_size(t);
    /* fp64 goes through the inline compute stream, the rest through the comm worker */
    fb_stream *s = t == FB_F64 ? rc->comp : rc->comm;
    for (size_t ci = 0; ci < sizeof COUNTS / sizeof *COUNTS; ci++) {
      const size_t n = COUNTS[ci];
      dbuf a, b;
      /* all_gather */
      dalloc(rc, &a, t, n);
      dalloc(rc, &b, t, n * W);
      dfill(rc, &a, t, 0, n, r, 0);
      RCHECK_OK(rc, fb_all_gather(rc->c, s, 0, a.b.ptr, b.b.ptr, n, t));
      for (int j = 0; j < W; j++) dexpect(rc, s, &b, t, j * n, n, E_VALUE, j, 0, "all_gather");
      dfree(rc, &b);
      dfree(rc, &a);
      /* all_gather in place: send = recv + r*n */
      dalloc(rc, &b, t, n * W);
      dfill(rc, &b, t, r * n, n, r, 0);
      RCHECK_OK(rc, fb_all_gather(rc->c, s, 0, (char *)b.b.ptr + r * n * es, b.b.ptr, n, t));
      for (int j = 0; j < W; j++) dexpect(rc, s, &b, t, j * n, n, E_VALUE, j, 0, "all_gather in place");
      dfree(rc, &b);
      /* reduce_scatter: send holds W*n elements */
      dalloc(rc, &a, t, n * W);
      dalloc(rc, &b, t, n);
      dfill(rc, &a, t, 0, n * W, r, 0);
      RCHECK_OK(rc, fb_reduce_scatter(rc->c, s, 1, a.b.ptr, b.b.ptr, n, t));
      dexpect(rc, s, &b, t, 0, n, E_SUM, 0, r * n, "reduce_scatter");
      /* ... in place: recv = send + r*n */
      RCHECK_OK(rc, fb_reduce_scatter(rc->c, s, 1, a.b.ptr, (char *)a.b.ptr + r * n * es, n, t));
      dexpect(rc, s, &a, t, r * n, n, E_SUM, 0, r * n, "reduce_scatter in place");
      dfree(rc, &b);
      dfree(rc, &a);
      /* all_reduce, then in place */
      dalloc(rc, &a, t, n);
      dalloc(rc, &b, t, n);
      dfill(rc, &a, t, 0, n, r, 0);
      RCHECK_OK(rc, fb_all_reduce(rc->c, s, 2, a.b.ptr, b.b.ptr, n, t));
      dexpect(rc, s, &b, t, 0, n, E_SUM, 0, 0, "all_reduce");
      dexpect(rc, s, &a, t, 0, n, E_VALUE, r, 0, "all_reduce leaves send");
      RCHECK_OK(rc, fb_all_reduce(rc->c, s, 2, a.b.ptr, a.b.ptr, n, t));
      dexpect(rc, s, &a, t, 0, n, E_SUM, 0, 0, "all_reduce in place");
      dfree(rc, &b);
      dfree(rc, &a);
      /* broadcast */
      const int broot = (int)((n + ti) % (size_t)W);
      dalloc(rc, &a, t, n);
      if (r == broot) dfill(rc, &a, t, 0, n, broot, 0);
      RCHECK_OK(rc, fb_broadcast(rc->c, s, -1, a.b.ptr, n, t, broot));
      dexpect(rc, s, &a, t, 0, n, E_VALUE, broot, 0, "broadcast");
      dfree(rc, &a);
      /* reduce (recv on the root only), then in place on the root */
      const int rroot = (int)((n * 3 + 1 + ti) % (size_t)W);
      dalloc(rc, &a, t, n);
      dalloc(rc, &b, t, r == rroot ? n : 0);
      dfill(rc, &a, t, 0, n, r, 0);
      RCHECK_OK(rc, fb_reduce(rc->c, s, -1, a.b.ptr, r == rroot ? b.b.ptr : NULL, n, t, rroot));
      if (r == rroot) dexpect(rc, s, &b, t, 0, n, E_SUM, 0, 0, "reduce");
      dexpect(rc, s, &a, t, 0, n, E_VALUE, r, 0, "reduce leaves send");
      RCHECK_OK(rc, fb_reduce(rc->c, s, -1, a.b.ptr, r == rroot ? a.b.ptr : NULL, n, t, rroot));
      if (r == rroot) dexpect(rc, s, &a, t, 0, n, E_SUM, 0, 0, "reduce in place");
      else dexpect(rc, s, &a, t, 0, n, E_VALUE, r, 0, "reduce leaves non-root");
      dfree(rc, &b);
      dfree(rc, &a);
      RCHECK_OK(rc, fb_barrier(rc->c, s));
    }
    /* collectives of one comm must be ordered: drain the worker before the next dtype moves
     * to the inline stream (or back) */
    RCHECK_OK(rc, fb_stream_sync(rc->dev, s));
  }
  /* queued ahead: 12 all_reduces of different sizes issued before anything is read back */
  enum { K = 12 };
  dbuf q[K];
  for (int k = 0; k < K; k++) {
    dalloc(rc, &q[k], FB_F32, 100 + 37 * (size_t)k);
    dfill(rc, &q[k], FB_F32, 0, q[k].n, r, 0);
  }
  for (int k = 0; k < K; k++)
    RCHECK_OK(rc, fb_all_reduce(rc->c, rc->comm, k, q[k].b.ptr, q[k].b.ptr, q[k].n, FB_F32));
  RCHECK_OK(rc, fb_stream_sync(rc->dev, rc->comm));
  for (int k = 0; k < K; k++) {
    dexpect(rc, rc->comm, &q[k], FB_F32, 0, q[k].n, E_SUM, 0, 0, "queued all_reduce");
    dfree(rc, &q[k]);
  }
}

static void *rank_main(void *p) {
  rank_ctx *rc = p;
  fb_status st = rank_open(rc);
  rcheck(rc, st == FB_OK, "open: %s", fb_error_msg());
  if (st == FB_OK) run_cases(rc);
  rank_close(rc);
  return NULL;
}

static void test_world(int W) {
  fb_local_group *g = NULL;
  CHECK_OK(fb_local_group_create(W, 10.0, &g));
  if (!g) return;
  rank_ctx rc[8];
  pthread_t th[8];
  for (int r = 0; r < W; r++) {
    rc[r] = (rank_ctx){.r = r, .W = W, .g = g};
    pthread_create(&th[r], NULL, rank_main, &rc[r]);
  }
  int fails = 0, checks = 0;
  for (int r = 0; r < W; r++) {
    pthread_join(th[r], NULL);
    fails += rc[r].fails;
    checks += rc[r].checks;
  }
  CHECK(fails == 0 && checks > 1000, "W=%d: %d of %d rank checks failed", W, fails, checks);
  fb_local_group_destroy(g);
}

/* ---- failures ------------------------------------------------------------------------------ */

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static pthread_barrier_t test_bar;

static void *timeout_rank(void *p) {
  rank_ctx *rc = p;
  fb_status st = rank_open(rc);
  rcheck(rc, st == FB_OK, "open: %s", fb_error_msg());
  if (st != FB_OK) {
    pthread_barrier_wait(&test_bar);
    rank_close(rc);
    return NULL;
  }
  dbuf a, b;
  dalloc(rc, &a, FB_F32, 5);
  dalloc(rc, &b, FB_F32, 5 * (size_t)rc->W);
  if (rc->r != 2) { /* rank 2 skips this all_gather */
    double t0 = wall();
    RCHECK_OK(rc, fb_all_gather(rc->c, rc->comm, 0, a.b.ptr, b.b.ptr, 5, FB_F32));
    st = fb_stream_sync(rc->dev, rc->comm);
    rc->timeout_elapsed = wall() - t0;
    const char *m = fb_error_msg();
    /* timed out itself, or aborted by the rank that did (the message names rank 2 either way) */
    rcheck(rc, st == FB_ETIMEOUT || st == FB_ECOMM, "skipped rank: %s", fb_status_name(st));
    rcheck(rc, strstr(m, "rank 2 did not reach all_gather #1 (count 5, fp32) within 0.3 s") &&
                   strstr(m, "waited") && !strchr(m, '\n'),
           "message: %s", m);
  }
  pthread_barrier_wait(&test_bar);
  if (rc->r == 2) { /* the group is poisoned: the late rank fails at once instead of hanging */
    double t0 = wall();
    RCHECK_OK(rc, fb_barrier(rc->c, rc->comm));
    st = fb_stream_sync(rc->dev, rc->comm);
    rc->timeout_elapsed = wall() - t0;
    rcheck(rc, st == FB_ECOMM && strstr(fb_error_msg(), "barrier #1"), "late rank: %s %s",
           fb_status_name(st), fb_error_msg());
  }
  fb_free(rc->dev, &a.b, rc->comm);
  fb_free(rc->dev, &b.b, rc->comm);
  rank_close(rc);
  return NULL;
}

static void test_timeout(void) {
  const int W = 3;
  fb_local_group *g = NULL;
  CHECK_OK(fb_local_group_create(W, 0.3, &g));
  if (!g) return;
  pthread_barrier_init(&test_bar, NULL, W);
  rank_ctx rc[3];
  pthread_t th[3];
  for (int r = 0; r < W; r++) {
    rc[r] = (rank_ctx){.r = r, .W = W, .g = g};
    pthread_create(&th[r], NULL, timeout_rank, &rc[r]);
  }
  for (int r = 0; r < W; r++) {
    pthread_join(th[r], NULL);
    CHECK(rc[r].fails == 0, "timeout test rank %d: %d failures", r, rc[r].fails);
  }
  for (int r = 0; r < 2; r++)
    CHECK(rc[r].timeout_elapsed > 0.25 && rc[r].timeout_elapsed < 2.0,
          "rank %d timed out after %.3f s (timeout 0.3 s)", r, rc[r].timeout_elapsed);
  CHECK(rc[2].timeout_elapsed < 0.25, "late rank failed fast: %.3f s", rc[2].timeout_elapsed);
  pthread_barrier_destroy(&test_bar);
  fb_local_group_destroy(g);
}

static void *mismatch_rank(void *p) {
  rank_ctx *rc = p;
  fb_status st = rank_open(rc);
  rcheck(rc, st == FB_OK, "open: %s", fb_error_msg());
  if (st == FB_OK) {
    dbuf a, b;
    dalloc(rc, &a, FB_F32, 8);
    dalloc(rc, &b, FB_F32, 8);
    if (rc->r == 0) RCHECK_OK(rc, fb_all_gather(rc->c, rc->comm, 0, a.b.ptr, b.b.ptr, 4, FB_F32));
    else RCHECK_OK(rc, fb_all_reduce(rc->c, rc->comm, 0, a.b.ptr, b.b.ptr, 4, FB_F32));
    st = fb_stream_sync(rc->dev, rc->comm);
    const char *m = fb_error_msg();
    rcheck(rc, st == FB_ECOMM && strstr(m, "mismatch") && strstr(m, "rank 0 issued all_gather") &&
                   strstr(m, "rank 1 issued all_reduce"),
           "mismatch: %s %s", fb_status_name(st), m);
    fb_free(rc->dev, &a.b, rc->comm);
    fb_free(rc->dev, &b.b, rc->comm);
  }
  rank_close(rc);
  return NULL;
}

static void test_mismatch(void) {
  fb_local_group *g = NULL;
  CHECK_OK(fb_local_group_create(2, 5.0, &g));
  if (!g) return;
  rank_ctx rc[2];
  pthread_t th[2];
  double t0 = wall();
  for (int r = 0; r < 2; r++) {
    rc[r] = (rank_ctx){.r = r, .W = 2, .g = g};
    pthread_create(&th[r], NULL, mismatch_rank, &rc[r]);
  }
  for (int r = 0; r < 2; r++) {
    pthread_join(th[r], NULL);
    CHECK(rc[r].fails == 0, "mismatch test rank %d: %d failures", r, rc[r].fails);
  }
  CHECK(wall() - t0 < 2.0, "mismatch found without waiting for the timeout");
  fb_local_group_destroy(g);
}

static void test_setup_errors(void) {
  fb_local_group *g = NULL;
  CHECK(fb_local_group_create(0, 1.0, &g) == FB_EUSAGE, "world 0");
  CHECK_OK(fb_local_group_create(2, 1.0, &g));
  fb_device *d = NULL;
  CHECK_OK(fb_device_open(&fb_cpu_device_ops, 0, 2, 1, 0, NULL, &d));
  fb_comm *c = NULL, *c2 = NULL;
  CHECK(fb_comm_local_create(g, 2, d, &c) != FB_OK, "rank out of range");
  CHECK(fb_comm_local_create(g, 1, d, &c) != FB_OK, "device rank differs");
  CHECK_OK(fb_comm_local_create(g, 0, d, &c));
  CHECK(fb_comm_local_create(g, 0, d, &c2) != FB_OK, "rank taken twice");
  fb_stream *s = NULL;
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMM, &s));
  CHECK(fb_broadcast(c, s, -1, NULL, 0, FB_F32, 2) == FB_EINTERNAL &&
            strstr(fb_error_msg(), "root 2 out of range"),
        "bad root: %s", fb_error_msg());
  CHECK(fb_all_reduce(c, s, -1, NULL, NULL, 4, FB_F32) == FB_EINTERNAL &&
            strstr(fb_error_msg(), "NULL"),
        "NULL buffer: %s", fb_error_msg());
  float x[4];
  CHECK(fb_all_reduce(c, s, -1, x, x, 4, FB_I32) == FB_EUNSUPPORTED, "i32: %s", fb_error_msg());
  CHECK(fb_comm_lookup("local") == c->ops && fb_comm_lookup("nope") == NULL, "registry");
  CHECK(fb_comm_lookup("sim") && !strcmp(fb_comm_lookup("sim")->name, "sim"), "sim registered");
#ifndef FB_HAVE_MPI
  CHECK(fb_comm_lookup("mpi") == NULL, "no mpi in this build");
#endif
  d->ops->stream_destroy(d, s);
  fb_comm_destroy(c);
  fb_device_close(d);
  fb_local_group_destroy(g);
}


/* ---- recording: the wrappers stamp marks on the comm stream around the collective -------- */

typedef struct rec_ctx {
  rank_ctx rc;
  fb_step_stats st;
  int n_ops;
} rec_ctx;

/* Rank 1 starts its delay only once rank 0 has issued its all_reduce, so the wait that rank 0
 * records does not depend on when the two threads were scheduled. */
static pthread_barrier_t rec_issued;

static void *recorded_rank(void *p) {
  rec_ctx *x = p;
  rank_ctx *rc = &x->rc;
  fb_status st = rank_open(rc);
  rcheck(rc, st == FB_OK, "open: %s", fb_error_msg());
  fb_recorder *rec = NULL;
  if (st == FB_OK) {
    fb_rec_config cfg = {.trace = false};
    RCHECK_OK(rc, fb_recorder_create(rc->dev, &cfg, &rec));
  }
  if (!rec) pthread_barrier_wait(&rec_issued); /* the other rank still meets this rank */
  if (rec) {
    rc->dev->rec = rec;
    fb_recorder_stream(rec, rc->comp, "compute");
    fb_recorder_stream(rec, rc->comm, "comm");
    fb_recorder_step_begin(rec, 0, 0);
    dbuf a;
    dalloc(rc, &a, FB_F32, 1000);
    dfill(rc, &a, FB_F32, 0, 1000, rc->r, 0);
    if (rc->r == 1) { /* rank 0's all_reduce (issued, queued) waits ~300 ms for rank 1 */
      pthread_barrier_wait(&rec_issued);
      struct timespec ts = {0, 300000000L};
      nanosleep(&ts, NULL);
    }
    RCHECK_OK(rc, fb_all_reduce(rc->c, rc->comm, 3, a.b.ptr, a.b.ptr, 1000, FB_F32));
    if (rc->r == 0) pthread_barrier_wait(&rec_issued);
    RCHECK_OK(rc, fb_stream_sync(rc->dev, rc->comm));
    dexpect(rc, rc->comm, &a, FB_F32, 0, 1000, E_SUM, 0, 0, "recorded all_reduce");
    RCHECK_OK(rc, fb_recorder_step_end(rec, &x->st));
    fb_free(rc->dev, &a.b, NULL);
    rc->dev->rec = NULL;
    fb_recorder_destroy(rec);
  }
  rank_close(rc);
  return NULL;
}

static void test_recorded(void) {
  fb_local_group *g = NULL;
  CHECK_OK(fb_local_group_create(2, 10.0, &g));
  if (!g) return;
  rec_ctx x[2];
  pthread_t th[2];
  pthread_barrier_init(&rec_issued, NULL, 2);
  for (int r = 0; r < 2; r++) {
    memset(&x[r], 0, sizeof x[r]);
    x[r].rc = (rank_ctx){.r = r, .W = 2, .g = g};
    pthread_create(&th[r], NULL, recorded_rank, &x[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&rec_issued);
  for (int r = 0; r < 2; r++) {
    const fb_step_stats *s = &x[r].st;
    CHECK(x[r].rc.fails == 0, "recorded rank %d: %d failures", r, x[r].rc.fails);
    CHECK(s->coll_bytes[FB_COLL_ALL_REDUCE] == 8000, "rank %d ledger: %g bytes", r,
          s->coll_bytes[FB_COLL_ALL_REDUCE]);
    CHECK(s->n_ops >= 1, "rank %d: %d ops recorded", r, s->n_ops);
  }
  CHECK(x[0].st.comm >= 0.09 && x[0].st.comm < 2.0,
        "rank 0's all_reduce spans its wait for rank 1 on the comm track: %.3f s", x[0].st.comm);
  CHECK(x[1].st.comm < 0.09, "rank 1 did not wait: %.3f s", x[1].st.comm);
  fb_local_group_destroy(g);
}

int main(void) {
  /* the fp32/fp64 data really discriminates the summation order */
  int differs32 = 0, differs64 = 0;
  for (size_t i = 0; i < 1031; i++) {
    val a = sum_in_order(FB_F32, 3, i), b = sum_reversed(FB_F32, 3, i);
    val c = sum_in_order(FB_F64, 4, i), d = sum_reversed(FB_F64, 4, i);
    differs32 += a.f != b.f;
    differs64 += c.d != d.d;
  }
  CHECK(differs32 > 10 && differs64 > 10, "order-sensitive data: %d fp32, %d fp64 differ",
        differs32, differs64);
  test_setup_errors();
  const int worlds[] = {1, 2, 3, 4, 8};
  for (int i = 0; i < 5; i++) test_world(worlds[i]);
  test_timeout();
  test_mismatch();
  test_recorded();
  return fb_test_done("test_comm_local");
}
