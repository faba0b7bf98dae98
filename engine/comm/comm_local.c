/* The local communicator: the W ranks are threads of one process sharing a group.
 * Each collective runs as a host task on the stream it was issued on. Every rank publishes its
 * buffers and (op, count, dtype, root) in its slot of the group, meets the others at a
 * barrier, checks that all issued the same collective, then computes ITS OWN share reading
 * every rank's buffers directly. Sums run in rank order 0..W-1 starting from rank 0's value,
 * so a result is bitwise the sequential ((x0 + x1) + x2) + ... whatever W and the chunking;
 * a mesh's reduction (call.mesh) too, both stages at once over the world (mesh_reduction).
 * A barrier that waits longer than the comm's timeout_s fails with FB_ETIMEOUT naming the ranks
 * that did not arrive (one line: "rank 1 did not reach all_gather #7 (...) within 3 s ...") and
 * poisons the group, so the other ranks fail too instead of hanging. It does not record
 * timings (comm.c).
 * Groups (fb_comm_split): the ranks exchange (color, key) through the parent group's slots;
 * the first member of each color creates the sub-group, owned by the parent group (freed
 * with it) and poisoned with it, so an abort of the run's group reaches every sub-group. */
#define _GNU_SOURCE
#include "comm.h"
#include "host_queue.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What one rank issued for one collective (or a split), published in its slot of the group. */
typedef struct coll_args {
  fb_coll_call call; /* call.op is OP_SPLIT for a split */
  uint64_t seq;     /* 1-based number of this rank's collective */
  double timeout_s; /* the issuing comm's c->timeout_s; <= 0 waits forever */
  int color, key;   /* split */
  struct fb_local_group *child; /* split: the sub-group its first member created */
} coll_args;

#define OP_SPLIT FB_NCOLL /* a split exchanges (color, key) in the collectives' slots */

struct fb_local_group {
  int world;
  double timeout_s; /* default for the comms created on it */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t gen;          /* barrier generation */
  int arrived;           /* ranks arrived in generation gen */
  uint64_t *arrived_gen; /* [world] 1 + last generation the rank arrived in */
  bool poisoned;
  fb_status poison_st;
  char poison_msg[400];
  coll_args *slots; /* [world] */
  bool *attached;   /* [world] */
  struct fb_local_group *children, *sibling; /* groups split from this one (owned) */
};

typedef struct local_comm {
  fb_local_group *g;
  fb_host_queue q;  /* pending collectives (host_queue.h) */
  const void **src; /* [world] scratch for the reducing loops (used by the stream's thread) */
} local_comm;

/* ---- group ------------------------------------------------------------------------------ */

fb_status fb_local_group_create(int world, double timeout_s, fb_local_group **out) {
  *out = NULL;
  if (world < 1) return FB_ERR(FB_EUSAGE, "local comm: world %d must be >= 1", world);
  fb_status st = FB_OK;
  fb_local_group *g = calloc(1, sizeof *g);
  if (!g) return FB_ERR(FB_ENOMEM, "local comm: out of host memory");
  g->world = world;
  g->timeout_s = timeout_s;
  g->arrived_gen = calloc((size_t)world, sizeof *g->arrived_gen);
  g->slots = calloc((size_t)world, sizeof *g->slots);
  g->attached = calloc((size_t)world, sizeof *g->attached);
  if (!g->arrived_gen || !g->slots || !g->attached) {
    st = FB_ERR(FB_ENOMEM, "local comm: out of host memory for %d ranks", world);
    goto fail_arrays;
  }
  if (pthread_mutex_init(&g->mu, NULL) != 0) {
    st = FB_ERR(FB_EINTERNAL, "local comm: pthread_mutex_init failed");
    goto fail_arrays;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (rc != 0) {
    st = FB_ERR(FB_EINTERNAL, "local comm: pthread_cond_init failed");
    goto fail_mutex;
  }
  *out = g;
  return FB_OK;

fail_mutex:
  pthread_mutex_destroy(&g->mu);
fail_arrays:
  free(g->attached);
  free(g->slots);
  free(g->arrived_gen);
  free(g);
  return st;
}

void fb_local_group_destroy(fb_local_group *g) {
  if (!g) return;
  for (fb_local_group *k = g->children, *nx; k; k = nx) {
    nx = k->sibling;
    fb_local_group_destroy(k);
  }
  for (int r = 0; r < g->world; r++) assert(!g->attached[r] && "destroy the comms first");
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free(g->attached);
  free(g->slots);
  free(g->arrived_gen);
  free(g);
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "all_gather #3 (count 7, fp32)" */
static void describe(const coll_args *a, char *buf, size_t n) {
  const fb_coll_call *k = &a->call;
  const unsigned long long seq = (unsigned long long)a->seq;
  if (k->op == OP_SPLIT)
    snprintf(buf, n, "split #%llu (color %d, key %d)", seq, a->color, a->key);
  else if (k->op == FB_COLL_BARRIER)
    snprintf(buf, n, "barrier #%llu", seq);
  else if (k->op == FB_COLL_BROADCAST || k->op == FB_COLL_REDUCE)
    snprintf(buf, n, "%s #%llu (count %zu, %s, root %d)", fb_coll_name(k->op), seq, k->count,
             fb_dtype_name(k->t), k->root);
  else
    snprintf(buf, n, "%s #%llu (count %zu, %s)", fb_coll_name(k->op), seq, k->count,
             fb_dtype_name(k->t));
}

/* Called with g->mu held. FB_ECOMM whatever poisoned the group: this rank failed because
 * another did (the runner reports the rank that timed out, FB_ETIMEOUT, before these). */
static fb_status aborted(fb_local_group *g, int rank, const coll_args *a) {
  char what[128];
  describe(a, what, sizeof what);
  return FB_ERR(FB_ECOMM, "rank %d: %s aborted because the group failed: %s", rank, what,
                g->poison_msg);
}

/* Called with g->mu held; takes the sub-groups' locks (always parent before child). */
static void poison_group(fb_local_group *g, fb_status st, const char *msg) {
  if (!g->poisoned) {
    g->poisoned = true;
    g->poison_st = st;
    snprintf(g->poison_msg, sizeof g->poison_msg, "%s", msg);
  }
  pthread_cond_broadcast(&g->cv);
  for (fb_local_group *k = g->children; k; k = k->sibling) {
    pthread_mutex_lock(&k->mu);
    poison_group(k, st, msg);
    pthread_mutex_unlock(&k->mu);
  }
}

static fb_status group_barrier(fb_local_group *g, int rank, const coll_args *a) {
  pthread_mutex_lock(&g->mu);
  fb_status st = FB_OK;
  if (g->poisoned) {
    st = aborted(g, rank, a);
    goto out;
  }
  const uint64_t gen = g->gen;
  if (g->arrived_gen[rank] == gen + 1) { /* this rank already waits here from another thread */
    char what[128], msg[400];
    describe(a, what, sizeof what);
    snprintf(msg, sizeof msg, "rank %d: %s overlaps another collective of the same rank "
             "(collectives of one communicator must run in order: issue them on one stream or "
             "order the streams with events)", rank, what);
    st = FB_ERR(FB_ECOMM, "%s", msg);
    poison_group(g, FB_ECOMM, msg);
    goto out;
  }
  g->arrived_gen[rank] = gen + 1;
  if (++g->arrived == g->world) {
    g->arrived = 0;
    g->gen++;
    pthread_cond_broadcast(&g->cv);
    goto out;
  }
  const double t0 = mono_s();
  const bool forever = !(a->timeout_s > 0);
  struct timespec dl;
  if (!forever) {
    double end = t0 + a->timeout_s;
    dl.tv_sec = (time_t)end;
    dl.tv_nsec = (long)((end - (double)dl.tv_sec) * 1e9);
    if (dl.tv_nsec >= 1000000000L) {
      dl.tv_sec++;
      dl.tv_nsec -= 1000000000L;
    }
  }
  while (g->gen == gen && !g->poisoned) {
    int rc = forever ? pthread_cond_wait(&g->cv, &g->mu) : pthread_cond_timedwait(&g->cv, &g->mu, &dl);
    if (rc == ETIMEDOUT && g->gen == gen && !g->poisoned) {
      char missing[200] = "", what[128];
      size_t used = 0;
      int nmiss = 0;
      for (int j = 0; j < g->world && used < sizeof missing; j++)
        if (g->arrived_gen[j] != gen + 1) {
          used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                                   used ? ", " : "", j);
          nmiss++;
        }
      describe(a, what, sizeof what);
      st = FB_ERR(FB_ETIMEOUT, "rank%s %s did not reach %s within %g s (rank %d waited %.1f s): "
                  "%s", nmiss > 1 ? "s" : "", missing, what, a->timeout_s, rank, mono_s() - t0,
                  nmiss > 1 ? "they failed or are stuck" : "it failed or is stuck");
      poison_group(g, st, fb_error_msg());
      goto out;
    }
  }
  if (g->gen == gen) st = aborted(g, rank, a); /* poisoned while waiting */
out:
  pthread_mutex_unlock(&g->mu);
  return st;
}

/* ---- arithmetic ------------------------------------------------------------------------- */

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

#define BLK 512

/* dst[i] = src[0][off+i] + src[1][off+i] + ... in rank order, for i < n. dst may alias any
 * src at the same index (each block is read completely before it is written). */
static void reduce_range(fb_dtype t, void *dst, const void *const *src, int world, size_t off,
                         size_t n) {
  for (size_t b0 = 0; b0 < n; b0 += BLK) {
    const size_t m = n - b0 < BLK ? n - b0 : BLK;
    const size_t o = off + b0;
    switch (t) {
    case FB_F32: {
      float acc[BLK];
      memcpy(acc, (const float *)src[0] + o, m * sizeof *acc);
      for (int j = 1; j < world; j++) {
        const float *x = (const float *)src[j] + o;
        for (size_t i = 0; i < m; i++) acc[i] += x[i];
      }
      memcpy((float *)dst + b0, acc, m * sizeof *acc);
      break;
    }
    case FB_F64: {
      double acc[BLK];
      memcpy(acc, (const double *)src[0] + o, m * sizeof *acc);
      for (int j = 1; j < world; j++) {
        const double *x = (const double *)src[j] + o;
        for (size_t i = 0; i < m; i++) acc[i] += x[i];
      }
      memcpy((double *)dst + b0, acc, m * sizeof *acc);
      break;
    }
    case FB_U64: {
      uint64_t acc[BLK];
      memcpy(acc, (const uint64_t *)src[0] + o, m * sizeof *acc);
      for (int j = 1; j < world; j++) {
        const uint64_t *x = (const uint64_t *)src[j] + o;
        for (size_t i = 0; i < m; i++) acc[i] += x[i];
      }
      memcpy((uint64_t *)dst + b0, acc, m * sizeof *acc);
      break;
    }
    case FB_BF16: {
      float acc[BLK];
      const uint16_t *x0 = (const uint16_t *)src[0] + o;
      for (size_t i = 0; i < m; i++) acc[i] = bf16_to_f32(x0[i]);
      for (int j = 1; j < world; j++) {
        const uint16_t *x = (const uint16_t *)src[j] + o;
        for (size_t i = 0; i < m; i++) acc[i] += bf16_to_f32(x[i]);
      }
      uint16_t *y = (uint16_t *)dst + b0;
      for (size_t i = 0; i < m; i++) y[i] = f32_to_bf16(acc[i]);
      break;
    }
    default: assert(!"dtype checked by the wrapper");
    }
  }
}

static void copy_bytes(void *dst, const void *src, size_t n) {
  if (n && dst != src) memmove(dst, src, n);
}

/* Chunk j of n elements split W ways: the first n % W chunks get one extra element. */
static void chunk(size_t n, int world, int j, size_t *lo, size_t *len) {
  const size_t base = n / (size_t)world, rem = n % (size_t)world, uj = (size_t)j;
  *lo = uj * base + (uj < rem ? uj : rem);
  *len = base + (uj < rem ? 1 : 0);
}

/* ---- one collective, on one rank -------------------------------------------------------- */

static bool same(const coll_args *x, const coll_args *y) {
  const fb_coll_call *p = &x->call, *q = &y->call;
  return p->op == q->op && p->count == q->count && p->t == q->t && p->root == q->root &&
         p->mesh == q->mesh;
}

/* After the publishing barrier: every rank must have issued what rank 0 did (a split: any
 * color and key). Every rank finds the same mismatch; it meets the others once more so no slot
 * is rewritten while another rank still reads it, then fails the group for good. */
static fb_status check_same(fb_local_group *g, int r, const coll_args *a) {
  for (int j = 1; j < g->world; j++) {
    const coll_args *x = &g->slots[0], *y = &g->slots[j];
    if (x->call.op == OP_SPLIT ? y->call.op == OP_SPLIT : same(x, y)) continue;
    char w0[128], wj[128], msg[400];
    describe(x, w0, sizeof w0);
    describe(y, wj, sizeof wj);
    snprintf(msg, sizeof msg, "rank %d: collective mismatch: rank 0 issued %s but rank %d issued %s",
             r, w0, j, wj);
    fb_status st = group_barrier(g, r, a);
    pthread_mutex_lock(&g->mu);
    poison_group(g, FB_ECOMM, msg);
    pthread_mutex_unlock(&g->mu);
    if (st != FB_OK) return st;
    return FB_ERR(FB_ECOMM, "%s", msg);
  }
  return FB_OK;
}

/* A mesh reduction (call.mesh = SHARD, comm.h fb_comm_mesh): both stages at once over the
 * world, in world rank order. reduce_scatter: rank r gets slice r % SHARD of the sum; reduce:
 * the ranks whose shard rank is the root get the whole sum. The work is split so that each
 * element range is read and written by one rank (in-place buffers stay safe): the replicas
 * share a slice's ranges (reduce_scatter), all ranks the buffer's (reduce); each writes its
 * range into every receiver. */
static fb_status mesh_reduction(local_comm *lc, int r, const coll_args *a) {
  fb_local_group *g = lc->g;
  const int W = g->world, S = a->call.mesh, R = W / S;
  const fb_coll_call *k = &a->call;
  const size_t es = fb_dtype_size(k->t), n = k->count;
  const bool rs = k->op == FB_COLL_REDUCE_SCATTER;
  const int col = rs ? r % S : k->root; /* receivers: the ranks of this shard rank */
  size_t lo, len;
  chunk(n, rs ? R : W, rs ? r / S : r, &lo, &len);
  for (int j = 0; j < W; j++) lc->src[j] = g->slots[j].call.send;
  void *own = (char *)g->slots[col].call.recv + lo * es;
  reduce_range(k->t, own, lc->src, W, (rs ? (size_t)col * n : 0) + lo, len);
  for (int i = 1; i < R; i++)
    copy_bytes((char *)g->slots[i * S + col].call.recv + lo * es, own, len * es);
  return group_barrier(g, r, a);
}

static fb_status collective(local_comm *lc, int r, const coll_args *a) {
  fb_local_group *g = lc->g;
  const int W = g->world;
  const void **src = lc->src;
  const fb_coll_call *k = &a->call;
  g->slots[r] = *a; /* published: the barrier's mutex orders it before the others' reads */
  FB_TRY(group_barrier(g, r, a));
  FB_TRY(check_same(g, r, a));

  const size_t es = fb_dtype_size(k->t), n = k->count;
  if (k->mesh > 0) return mesh_reduction(lc, r, a);
  switch (k->op) {
  case FB_COLL_ALL_GATHER:
    for (int j = 0; j < W; j++)
      copy_bytes((char *)k->recv + (size_t)j * n * es, g->slots[j].call.send, n * es);
    return group_barrier(g, r, a);

  case FB_COLL_REDUCE_SCATTER:
    for (int j = 0; j < W; j++) src[j] = g->slots[j].call.send;
    reduce_range(k->t, k->recv, src, W, (size_t)r * n, n);
    return group_barrier(g, r, a);

  case FB_COLL_ALL_REDUCE: {
    size_t lo, len;
    chunk(n, W, r, &lo, &len);
    for (int j = 0; j < W; j++) src[j] = g->slots[j].call.send;
    reduce_range(k->t, (char *)k->recv + lo * es, src, W, lo, len);
    FB_TRY(group_barrier(g, r, a));
    for (int j = 0; j < W; j++) {
      if (j == r) continue;
      chunk(n, W, j, &lo, &len);
      copy_bytes((char *)k->recv + lo * es, (const char *)g->slots[j].call.recv + lo * es,
                 len * es);
    }
    return group_barrier(g, r, a);
  }

  case FB_COLL_BROADCAST:
    if (r != k->root) copy_bytes(k->recv, g->slots[k->root].call.recv, n * es);
    return group_barrier(g, r, a);

  case FB_COLL_REDUCE: {
    size_t lo, len;
    chunk(n, W, r, &lo, &len);
    for (int j = 0; j < W; j++) src[j] = g->slots[j].call.send;
    reduce_range(k->t, (char *)g->slots[k->root].call.recv + lo * es, src, W, lo, len);
    return group_barrier(g, r, a);
  }

  case FB_COLL_ALL_TO_ALL:
    for (int j = 0; j < W; j++)
      copy_bytes((char *)k->recv + (size_t)j * n * es,
                 (const char *)g->slots[j].call.send + (size_t)r * n * es, n * es);
    return group_barrier(g, r, a);

  case FB_COLL_BARRIER: return group_barrier(g, r, a);
  case FB_NCOLL: break;
  }
  return FB_ERR(FB_EINTERNAL, "local comm: unknown collective %d", (int)k->op);
}

/* ---- issuing on a stream ---------------------------------------------------------------- */

static fb_status run_job(fb_comm *c, const fb_host_job *j) {
  const coll_args a = {.call = j->call, .seq = j->seq, .timeout_s = c->timeout_s};
  return collective(c->impl, c->rank, &a);
}

static fb_status l_issue(fb_comm *c, fb_stream *s, const fb_coll_call *call) {
  local_comm *lc = c->impl;
  return fb_host_queue_issue(&lc->q, c, s, call);
}

/* The streams this comm used must be drained (synced) before it is destroyed. */
static void l_destroy(fb_comm *c) {
  local_comm *lc = c->impl;
  pthread_mutex_lock(&lc->g->mu);
  lc->g->attached[c->rank] = false;
  pthread_mutex_unlock(&lc->g->mu);
  fb_host_queue_fini(&lc->q);
  free(lc->src);
  free(lc);
  free(c);
}

static fb_status l_split(fb_comm *c, int color, int key, int size, fb_comm **out);

const fb_comm_ops fb_local_comm_ops = {
    .name = "local",
    .issue = l_issue,
    .split = l_split,
    .destroy = l_destroy,
    .host_memory = true,
    .exact_mesh = true,
};

/* A communicator for `rank` of group g on device dev (any rank of any device: a sub-group's
 * ranks are not the device's). */
static fb_status attach(fb_local_group *g, int rank, fb_device *dev, fb_comm **out) {
  fb_status st = FB_OK;
  fb_comm *c = calloc(1, sizeof *c);
  local_comm *lc = calloc(1, sizeof *lc);
  if (lc) lc->src = calloc((size_t)g->world, sizeof *lc->src);
  if (!c || !lc || !lc->src) {
    st = FB_ERR(FB_ENOMEM, "local comm: out of host memory");
    goto fail_free;
  }
  if ((st = fb_host_queue_init(&lc->q, "local comm", run_job)) != FB_OK) goto fail_free;
  pthread_mutex_lock(&g->mu);
  bool taken = g->attached[rank];
  if (!taken) g->attached[rank] = true;
  pthread_mutex_unlock(&g->mu);
  if (taken) {
    st = FB_ERR(FB_EINTERNAL, "local comm: rank %d already has a communicator in this group", rank);
    goto fail_queue;
  }
  lc->g = g;
  *c = (fb_comm){.ops = &fb_local_comm_ops, .impl = lc, .rank = rank, .world = g->world,
                 .dev = dev, .timeout_s = g->timeout_s};
  *out = c;
  return FB_OK;

fail_queue:
  fb_host_queue_fini(&lc->q);
fail_free:
  if (lc) free(lc->src);
  free(lc);
  free(c);
  return st;
}

fb_status fb_comm_local_create(fb_local_group *g, int rank, fb_device *dev, fb_comm **out) {
  *out = NULL;
  if (!g || !dev) return FB_ERR(FB_EINTERNAL, "local comm: group and device are required");
  if (rank < 0 || rank >= g->world)
    return FB_ERR(FB_EUSAGE, "local comm: rank %d out of range 0..%d", rank, g->world - 1);
  if (dev->world != g->world || dev->rank != rank)
    return FB_ERR(FB_EINTERNAL, "local comm: device is rank %d of %d but the comm is rank %d of %d",
                  dev->rank, dev->world, rank, g->world);
  return attach(g, rank, dev, out);
}

/* ---- groups ----------------------------------------------------------------------------- */

/* Rank r's group among the published slots: its size, r's index in it (by key, then rank)
 * and the rank of its first member. */
static void members(const fb_local_group *g, int r, int *n, int *sub, int *lead) {
  const int color = g->slots[r].color, key = g->slots[r].key;
  *n = *sub = 0;
  *lead = r;
  for (int j = 0; j < g->world; j++) {
    const coll_args *x = &g->slots[j];
    if (x->color != color) continue;
    (*n)++;
    if (x->key < key || (x->key == key && j < r)) (*sub)++;
    const int lk = g->slots[*lead].key;
    if (x->key < lk || (x->key == lk && j < *lead)) *lead = j;
  }
}

/* The first member creates the sub-group and links it under g (owned and poisoned by g). */
static fb_local_group *create_child(fb_local_group *g, int n) {
  fb_local_group *k = NULL;
  if (fb_local_group_create(n, g->timeout_s, &k) != FB_OK) return NULL;
  pthread_mutex_lock(&g->mu);
  k->sibling = g->children;
  g->children = k;
  if (g->poisoned) poison_group(g, g->poison_st, g->poison_msg);
  pthread_mutex_unlock(&g->mu);
  return k;
}

/* Three meetings of the parent group: publish (color, key); the first member of each color
 * publishes the sub-group it created; everyone has read it (the slots may be reused). */
static fb_status l_split(fb_comm *c, int color, int key, int size, fb_comm **out) {
  (void)size;
  local_comm *lc = c->impl;
  fb_local_group *g = lc->g;
  const int r = c->rank;
  const coll_args a = {.call = {.op = OP_SPLIT}, .color = color, .key = key,
                       .seq = fb_host_queue_next(&lc->q), .timeout_s = c->timeout_s};
  g->slots[r] = a;
  FB_TRY(group_barrier(g, r, &a));
  FB_TRY(check_same(g, r, &a));
  int n, sub, lead;
  members(g, r, &n, &sub, &lead);
  if (lead == r) g->slots[r].child = create_child(g, n);
  FB_TRY(group_barrier(g, r, &a));
  fb_local_group *k = g->slots[lead].child;
  fb_status st = k ? attach(k, sub, c->dev, out)
                   : FB_ERR(FB_ENOMEM, "rank %d: split: the group of color %d could not be "
                            "created (out of host memory)", r, color);
  fb_status st3 = group_barrier(g, r, &a);
  if (st == FB_OK && st3 != FB_OK) {
    l_destroy(*out);
    *out = NULL;
  }
  return st != FB_OK ? st : st3;
}

void fb_local_group_abort(fb_local_group *g) {
  pthread_mutex_lock(&g->mu);
  poison_group(g, FB_ECOMM, "another rank failed");
  pthread_mutex_unlock(&g->mu);
}
