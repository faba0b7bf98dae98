/* Communicator groups (fb_comm_split) on the local communicator: 4 rank threads, each with a
 * cpu device, split as a 2x2 mesh (shard groups {0,1},{2,3}, replica groups {0,2},{1,3}), as
 * 1x4 and 4x1, by color with a reversed key, and a split of a split. all_reduce, all_gather
 * and reduce_scatter on every sub-group must give exactly (bitwise) the members' values summed
 * in sub-rank order. Also: the sub-communicators' placement (stride), an abort of the parent
 * reaching a sub-group, and the sim communicator's strided split and its cost (a replica group
 * across nodes costs more than a shard group in one). It does not run mpi or nccl splits. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/comm/comm.h"
#include "engine/backends/cpu/device_cpu.h"
#include "engine/sim/cost_model.h"
#include "engine/sim/hardware.h"
#include "engine/backends/registry.h"

enum { W = 4, N = 37 };

/* Values whose fp32 sums depend on the order. */
static float fval(int rank, size_t i) {
  const int k = (int)(i % 101);
  return ((float)((rank * 7 + k * 3) % 11) - 5.0f) * (((rank + k) & 1) ? 1e8f : 1.0f) +
         0.1f * (float)rank + 1e-3f * (float)(k % 7);
}
static uint64_t uval(int rank, size_t i) {
  return ((uint64_t)rank + 1) * 0x9E3779B97F4A7C15ull * ((uint64_t)i + 1) ^ ((uint64_t)i << 40);
}

typedef struct rank_ctx {
  int r;
  fb_local_group *g;
  fb_device *dev;
  fb_comm *c;
  fb_stream *comp, *comm;
  int checks, fails;
} rank_ctx;

static void rcheck(rank_ctx *rc, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rcheck(rank_ctx *rc, int ok, const char *fmt, ...) {
  rc->checks++;
  if (ok || rc->fails++ >= 8) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: ", rc->r);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

#define ROK(rc, expr)                                                                          \
  do {                                                                                         \
    fb_status st_ = (expr);                                                                    \
    rcheck((rc), st_ == FB_OK, "%s -> %s: %s", #expr, fb_status_name(st_), fb_error_msg());   \
  } while (0)

/* The members of this rank's group in sub-rank order (parent ranks). */
typedef struct group {
  const char *name;
  int n, m[W];
} group;

static float fsum(const group *gr, size_t i) {
  float a = fval(gr->m[0], i);
  for (int j = 1; j < gr->n; j++) a += fval(gr->m[j], i);
  return a;
}

static void *buf_h2d(rank_ctx *rc, fb_buf *b, const void *host, size_t bytes) {
  ROK(rc, fb_alloc(rc->dev, bytes ? bytes : 1, FB_MEM_COMM, "test.split", b));
  if (bytes) ROK(rc, fb_copy_h2d(rc->dev, rc->comp, b->ptr, host, bytes));
  return b->ptr;
}

static void check_f32(rank_ctx *rc, fb_stream *s, const fb_buf *b, const float *want, size_t n,
                      const char *what, const group *gr) {
  float *h = malloc(n * sizeof *h);
  ROK(rc, fb_copy_d2h(rc->dev, s, h, b->ptr, n * sizeof *h));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += memcmp(&h[i], &want[i], sizeof *h) != 0;
  rcheck(rc, bad == 0, "%s on %s: %zu of %zu elements differ", what, gr->name, bad, n);
  free(h);
}

/* all_reduce (fp32 and u64), all_gather and reduce_scatter on sub-communicator c. */
static void exercise(rank_ctx *rc, fb_comm *c, const group *gr) {
  const int sub = c->rank, n = c->world;
  rcheck(rc, n == gr->n && gr->m[sub] == rc->r, "%s: rank %d is %d of %d, expected member %d of "
         "%d", gr->name, rc->r, sub, n, rc->r, gr->n);
  if (n != gr->n || gr->m[sub] != rc->r) return;
  fb_stream *s = rc->comm;
  float x[N * W], want[N * W];
  fb_buf a = {0}, b = {0};
  /* all_reduce fp32, in place */
  for (size_t i = 0; i < N; i++) x[i] = fval(rc->r, i), want[i] = fsum(gr, i);
  buf_h2d(rc, &a, x, N * 4);
  ROK(rc, fb_all_reduce(c, s, -1, a.ptr, a.ptr, N, FB_F32));
  check_f32(rc, s, &a, want, N, "all_reduce fp32", gr);
  fb_free(rc->dev, &a, s);
  /* all_reduce u64 (exact) */
  uint64_t u[N], uw[N], got[N];
  for (size_t i = 0; i < N; i++) {
    u[i] = uval(rc->r, i);
    uw[i] = 0;
    for (int j = 0; j < n; j++) uw[i] += uval(gr->m[j], i);
  }
  buf_h2d(rc, &a, u, sizeof u);
  ROK(rc, fb_alloc(rc->dev, sizeof u, FB_MEM_COMM, "test.split", &b));
  ROK(rc, fb_all_reduce(c, s, -1, a.ptr, b.ptr, N, FB_U64));
  ROK(rc, fb_copy_d2h(rc->dev, s, got, b.ptr, sizeof got));
  rcheck(rc, !memcmp(got, uw, sizeof got), "all_reduce u64 on %s differs", gr->name);
  fb_free(rc->dev, &a, s);
  fb_free(rc->dev, &b, s);
  /* all_gather: recv[j*N + i] = member j's value */
  for (size_t i = 0; i < N; i++) x[i] = fval(rc->r, i);
  for (int j = 0; j < n; j++)
    for (size_t i = 0; i < N; i++) want[j * N + i] = fval(gr->m[j], i);
  buf_h2d(rc, &a, x, N * 4);
  ROK(rc, fb_alloc(rc->dev, (size_t)n * N * 4, FB_MEM_COMM, "test.split", &b));
  ROK(rc, fb_all_gather(c, s, -1, a.ptr, b.ptr, N, FB_F32));
  check_f32(rc, s, &b, want, (size_t)n * N, "all_gather", gr);
  fb_free(rc->dev, &a, s);
  fb_free(rc->dev, &b, s);
  /* reduce_scatter: this rank's chunk sub of the members' n*N values, summed in sub-rank order */
  for (size_t i = 0; i < (size_t)n * N; i++) x[i] = fval(rc->r, i);
  for (size_t i = 0; i < N; i++) want[i] = fsum(gr, (size_t)sub * N + i);
  buf_h2d(rc, &a, x, (size_t)n * N * 4);
  ROK(rc, fb_alloc(rc->dev, N * 4, FB_MEM_COMM, "test.split", &b));
  ROK(rc, fb_reduce_scatter(c, s, -1, a.ptr, b.ptr, N, FB_F32));
  check_f32(rc, s, &b, want, N, "reduce_scatter", gr);
  fb_free(rc->dev, &a, s);
  fb_free(rc->dev, &b, s);
  ROK(rc, fb_stream_sync(rc->dev, s));
}

/* Groups of `size` ranks `stride` apart, as fb_comm_split_strided defines them. */
static group strided(const char *name, int r, int size, int stride) {
  group gr = {.name = name, .n = size};
  const int base = r % stride + r / (size * stride) * size * stride;
  for (int i = 0; i < size; i++) gr.m[i] = base + i * stride;
  return gr;
}

static void mesh_case(rank_ctx *rc, int size, int stride, const char *name) {
  fb_comm *c = NULL;
  ROK(rc, fb_comm_split_strided(rc->c, size, stride, &c));
  if (!c) return;
  rcheck(rc, c->stride == (stride > 1 ? stride : 1) && c->dev == rc->dev,
         "%s: stride %d (want %d)", name, c->stride, stride);
  group gr = strided(name, rc->r, size, stride);
  exercise(rc, c, &gr);
  /* the parent still works after the split, interleaved with the sub-group */
  group all = strided("parent", rc->r, W, 1);
  exercise(rc, rc->c, &all);
  exercise(rc, c, &gr);
  fb_comm_destroy(c);
}

/* Color = rank parity, key = -rank: groups {3,1} and {2,0} in that order. Then split the
 * 1x4 group again into halves (a split of a split). */
static void color_cases(rank_ctx *rc) {
  fb_comm *c = NULL;
  ROK(rc, fb_comm_split(rc->c, rc->r % 2, -rc->r, &c));
  if (c) {
    group gr = {.name = "parity, reversed key", .n = 2,
                .m = {rc->r % 2 ? 3 : 2, rc->r % 2 ? 1 : 0}};
    exercise(rc, c, &gr);
    fb_comm_destroy(c);
  }
  fb_comm *all = NULL, *half = NULL;
  ROK(rc, fb_comm_split_strided(rc->c, W, 1, &all));
  if (all) ROK(rc, fb_comm_split_strided(all, 2, 1, &half));
  if (half) {
    group gr = strided("half of the 1x4 group", rc->r, 2, 1);
    exercise(rc, half, &gr);
    fb_comm_destroy(half);
  }
  if (all) fb_comm_destroy(all);
}

static void *rank_main(void *p) {
  rank_ctx *rc = p;
  fb_status st = fb_device_open(&fb_cpu_device_ops, rc->r, W, 1, 0, NULL, &rc->dev);
  if (st == FB_OK) st = rc->dev->ops->stream_create(rc->dev, FB_STREAM_COMPUTE, &rc->comp);
  if (st == FB_OK) st = rc->dev->ops->stream_create(rc->dev, FB_STREAM_COMM, &rc->comm);
  if (st == FB_OK) st = fb_comm_local_create(rc->g, rc->r, rc->dev, &rc->c);
  rcheck(rc, st == FB_OK, "open: %s", fb_error_msg());
  if (st == FB_OK) {
    mesh_case(rc, 2, 1, "2x2 shard group");
    mesh_case(rc, 2, 2, "2x2 replica group");
    mesh_case(rc, 4, 1, "1x4 shard group");
    mesh_case(rc, 1, 4, "1x4 replica group (one rank)");
    mesh_case(rc, 1, 1, "4x1 shard group (one rank)");
    mesh_case(rc, 4, 1, "4x1 replica group");
    color_cases(rc);
  }
  if (rc->comm) (void)fb_stream_sync(rc->dev, rc->comm);
  fb_comm_destroy(rc->c);
  if (rc->comm) rc->dev->ops->stream_destroy(rc->dev, rc->comm);
  if (rc->comp) rc->dev->ops->stream_destroy(rc->dev, rc->comp);
  fb_device_close(rc->dev);
  return NULL;
}

static void test_local(void) {
  fb_local_group *g = NULL;
  CHECK_OK(fb_local_group_create(W, 10.0, &g));
  if (!g) return;
  rank_ctx rc[W];
  pthread_t th[W];
  for (int r = 0; r < W; r++) {
    rc[r] = (rank_ctx){.r = r, .g = g};
    pthread_create(&th[r], NULL, rank_main, &rc[r]);
  }
  int fails = 0, checks = 0;
  for (int r = 0; r < W; r++) {
    pthread_join(th[r], NULL);
    fails += rc[r].fails;
    checks += rc[r].checks;
  }
  CHECK(fails == 0 && checks > 200, "%d of %d rank checks failed", fails, checks);
  fb_local_group_destroy(g); /* frees the sub-groups too */
}

/* An abort of the parent group fails a sub-group's pending collective at once. */
static pthread_barrier_t bar;

static void *abort_rank(void *p) {
  rank_ctx *rc = p;
  fb_status st = fb_device_open(&fb_cpu_device_ops, rc->r, W, 1, 0, NULL, &rc->dev);
  if (st == FB_OK) st = rc->dev->ops->stream_create(rc->dev, FB_STREAM_COMM, &rc->comm);
  if (st == FB_OK) st = fb_comm_local_create(rc->g, rc->r, rc->dev, &rc->c);
  fb_comm *sub = NULL;
  if (st == FB_OK) st = fb_comm_split_strided(rc->c, 2, 2, &sub);
  rcheck(rc, st == FB_OK, "open and split: %s", fb_error_msg());
  pthread_barrier_wait(&bar);
  if (sub && rc->r == 0) { /* rank 2, its partner, never comes: the abort must end the wait */
    ROK(rc, fb_barrier(sub, rc->comm));
    st = fb_stream_sync(rc->dev, rc->comm);
    rcheck(rc, st == FB_ECOMM && strstr(fb_error_msg(), "another rank failed"),
           "sub-group after the parent's abort: %s %s", fb_status_name(st), fb_error_msg());
  }
  if (rc->r == 3) fb_local_group_abort(rc->g);
  if (rc->comm) (void)fb_stream_sync(rc->dev, rc->comm);
  fb_comm_destroy(sub);
  fb_comm_destroy(rc->c);
  if (rc->comm) rc->dev->ops->stream_destroy(rc->dev, rc->comm);
  fb_device_close(rc->dev);
  return NULL;
}

static void test_abort(void) {
  fb_local_group *g = NULL;
  CHECK_OK(fb_local_group_create(W, 30.0, &g));
  if (!g) return;
  pthread_barrier_init(&bar, NULL, W);
  rank_ctx rc[W];
  pthread_t th[W];
  for (int r = 0; r < W; r++) {
    rc[r] = (rank_ctx){.r = r, .g = g};
    pthread_create(&th[r], NULL, abort_rank, &rc[r]);
  }
  for (int r = 0; r < W; r++) {
    pthread_join(th[r], NULL);
    CHECK(rc[r].fails == 0, "abort test rank %d: %d failures", r, rc[r].fails);
  }
  pthread_barrier_destroy(&bar);
  fb_local_group_destroy(g);
}

/* sim: only the strided split (ranks are simulated alone); a replica group 8 ranks apart
 * spans 8 nodes of 8 GPUs and costs more than the shard group of 8 consecutive ranks. */
static void test_sim(void) {
  fb_hardware hw;
  CHECK_OK(fb_hardware_load("h100", &hw));
  fb_device *d = NULL;
  CHECK_OK(fb_device_open(fb_device_lookup("sim"), 9, 64, 1, 0, &hw, &d));
  if (!d) return;
  fb_comm *c = NULL, *shard = NULL, *rep = NULL, *bad = NULL;
  CHECK_OK(fb_comm_sim_create(d, 9, 64, &c));
  CHECK(c && fb_comm_split(c, 1, 9, &bad) == FB_EUNSUPPORTED && !bad, "sim colour split accepted");
  CHECK_OK(fb_comm_split_strided(c, 8, 1, &shard));
  CHECK_OK(fb_comm_split_strided(c, 8, 8, &rep));
  CHECK(shard && shard->rank == 1 && shard->world == 8 && shard->stride == 1, "sim shard group");
  CHECK(rep && rep->rank == 1 && rep->world == 8 && rep->stride == 8, "sim replica group");
  CHECK(fb_comm_split_strided(c, 5, 1, &bad) != FB_OK && !bad, "64 ranks split into 5s accepted");
  /* placement: not placed, one node; placed 8 per node, the world spans 8 nodes, rank 9's
   * shard group (ranks 8..15) one node, its replica group (1, 9, ..., 57) 8 nodes */
  CHECK(c->nodes <= 1 && shard->nodes <= 1, "an unplaced communicator sits on one node");
  fb_comm *shard8 = NULL, *rep8 = NULL, *half = NULL;
  fb_comm_place(c, 0, 8);
  CHECK(c->nodes == 8, "64 ranks, 8 per node: %d nodes", c->nodes);
  CHECK_OK(fb_comm_split_strided(c, 8, 1, &shard8));
  CHECK_OK(fb_comm_split_strided(c, 8, 8, &rep8));
  CHECK_OK(fb_comm_split_strided(c, 8, 2, &half)); /* 1, 3, ..., 15: two nodes */
  CHECK(shard8 && shard8->first == 8 && shard8->nodes == 1, "shard group: first %d, %d nodes",
        shard8 ? shard8->first : -1, shard8 ? shard8->nodes : -1);
  CHECK(rep8 && rep8->first == 1 && rep8->nodes == 8, "replica group: first %d, %d nodes",
        rep8 ? rep8->first : -1, rep8 ? rep8->nodes : -1);
  CHECK(half && half->first == 1 && half->nodes == 2 && half->stride == 2,
        "every other rank of 16: first %d, %d nodes", half ? half->first : -1,
        half ? half->nodes : -1);
  fb_comm_destroy(half);
  fb_comm_destroy(rep8);
  fb_comm_destroy(shard8);
  const double S = 256.0 * (1 << 20);
  fb_op_cost in = {.kind = FB_OP_COLL, .coll = FB_COLL_ALL_REDUCE, .count = (int64_t)S / 4,
                   .dtype = FB_F32, .world = 8, .stride = 1};
  fb_op_cost across = in;
  across.stride = 8;
  const double t_in = fb_cost_seconds(&hw, &in, 64), t_across = fb_cost_seconds(&hw, &across, 64);
  fb_hardware one = hw;
  one.devices_per_node = 1; /* one GPU per node in the group, with its one NIC */
  one.nccl_ch_net = hw.nccl_ch_net / hw.devices_per_node;
  in.stride = 1;
  CHECK(t_across > 3 * t_in, "replica all-reduce across nodes %.3g s vs in a node %.3g s",
        t_across, t_in);
  CHECK_CLOSE(t_across, fb_cost_seconds(&one, &in, 64), 1e-12, 0);
  /* fewer NICs than replica groups (InternLM's 4 x 100 Gb per 8 GPUs): each group has half
   * an adapter, so a bandwidth-bound all-reduce takes twice what one whole adapter gives */
  fb_hardware four = hw;
  CHECK_OK(fb_hardware_set_network(&four, 4, 100));
  fb_hardware one4 = one;
  CHECK_OK(fb_hardware_set_network(&one4, 1, 50));
  fb_op_cost big = across;
  big.count = (int64_t)(4.0 * S); /* 4 GiB of fp32: bandwidth, not latency */
  const double t_half = fb_cost_seconds(&four, &big, 64);
  big.stride = 1;
  CHECK_CLOSE(t_half, fb_cost_seconds(&one4, &big, 64), 1e-12, 0);
  fb_hardware one100 = one;
  CHECK_OK(fb_hardware_set_network(&one100, 1, 100));
  CHECK(t_half > 1.8 * fb_cost_seconds(&one100, &big, 64),
        "half an adapter per group %.3g s vs a whole one %.3g s", t_half,
        fb_cost_seconds(&one100, &big, 64));
  fb_comm_destroy(rep);
  fb_comm_destroy(shard);
  fb_comm_destroy(c);
  fb_device_close(d);
}

int main(void) {
  test_local();
  test_abort();
  test_sim();
  return fb_test_done("test_comm_split");
}
