/* The sim device: virtual streams ordered by events (a comm op issued ahead overlaps compute,
 * which runs overlap_slowdown times slower under it; a wait makes compute start after comm),
 * marks resolve to virtual times equal to the cost model's durations, host syncs move now(),
 * the host-is-compute-stream mode delays comm to the host's program point, allocations are
 * counted through fb_alloc exactly as on cpu, faster hardware never slows a step, a long run
 * of ops stays cheap, and a named memset or copy runs at its name's measured rate (else the
 * plain memset0 / copy_d2d rate), and ranks that drift apart (rank_jitter) make a collective wait
 * for the latest, until a binding wait makes them meet. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "engine/comm/comm.h"
#include "engine/device/device.h"
#include "engine/device/kernels.h"
#include "engine/sim/contention.h"
#include "engine/sim/cost_model.h"
#include "engine/sim/hardware.h"
#include "engine/backends/registry.h"

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static fb_op_cost gemm(int64_t m, int64_t n, int64_t k) {
  fb_op_cost c = {.name = "gemm", .kind = FB_OP_GEMM, .dtype = FB_BF16, .m = m, .n = n, .k = k,
                  .batch = 1};
  c.flops = 2.0 * m * n * k;
  c.bytes = 2.0 * (double)(m * k + k * n + m * n);
  return c;
}

static fb_op_cost gather(int64_t count, int world) {
  return (fb_op_cost){.name = "all_gather", .kind = FB_OP_COLL, .coll = FB_COLL_ALL_GATHER,
                      .count = count, .dtype = FB_BF16, .world = world};
}

typedef struct sim {
  fb_device *d;
  fb_stream *comp, *comm;
  fb_event *e;
} sim;

static int open_sim(const fb_hardware *hw, int world, sim *s) {
  const fb_device_ops *ops = fb_device_lookup("sim");
  CHECK(ops != NULL, "sim device not registered");
  if (!ops) return 0;
  fb_status st = fb_device_open(ops, 0, world, 1, 0, hw, &s->d);
  CHECK(st == FB_OK, "open sim: %s", fb_error_msg());
  if (st != FB_OK) return 0;
  CHECK(s->d->simulated, "sim device not marked simulated");
  CHECK_OK(s->d->ops->stream_create(s->d, FB_STREAM_COMPUTE, &s->comp));
  CHECK_OK(s->d->ops->stream_create(s->d, FB_STREAM_COMM, &s->comm));
  CHECK_OK(s->d->ops->event_create(s->d, &s->e));
  return 1;
}

static void close_sim(sim *s) {
  s->d->ops->event_destroy(s->d, s->e);
  s->d->ops->stream_destroy(s->d, s->comm);
  s->d->ops->stream_destroy(s->d, s->comp);
  fb_device_close(s->d);
}

/* Times an op via marks, as the wrappers do. */
static void run_op(sim *s, fb_stream *st, const fb_op_cost *c, double *t0, double *t1) {
  fb_device *d = s->d;
  uint64_t a = d->ops->mark(d, st);
  d->ops->account(d, st, c);
  uint64_t b = d->ops->mark(d, st);
  CHECK(a != 0 && b != 0, "ticket 0");
  *t0 = d->ops->mark_time(d, a);
  *t1 = d->ops->mark_time(d, b);
}

/* The stretch of compute over busy comm intervals, with the flat factor (nccl_contention
 * off, ranks in lock-step): the timeline's mechanics; check_contention has the GPU model. */
static void check_overlap(const fb_hardware *h100) {
  fb_hardware hw = *h100;
  hw.overlap_slowdown = 1.5;
  hw.nccl_contention = false;
  hw.rank_speed_sigma = 0;
  sim s;
  if (!open_sim(&hw, 64, &s)) return;
  fb_device *d = s.d;
  CHECK(fb_now(d) == 0, "now at start %g", fb_now(d));
  /* comm issued ahead: a big all-gather on the comm stream */
  fb_op_cost ag = gather(INT64_C(1) << 24, 64);
  double c0, c1;
  run_op(&s, s.comm, &ag, &c0, &c1);
  CHECK(c0 == 0, "comm starts at %g", c0);
  CHECK_CLOSE(c1 - c0, fb_cost_seconds(&hw, &ag, 64), 1e-12, 0);
  CHECK_OK(fb_event_record(d, s.e, s.comm));
  /* compute overlapping it: a GEMM shorter than the comm runs 1.5x slower */
  fb_op_cost g = gemm(1024, 1024, 1024);
  double dur = fb_cost_seconds(&hw, &g, 64);
  CHECK(dur < (c1 - c0) / 2, "test setup: gemm %g not shorter than comm %g", dur, c1 - c0);
  double g0, g1;
  run_op(&s, s.comp, &g, &g0, &g1);
  CHECK(g0 == 0, "compute waited for comm without an event: starts at %g", g0);
  CHECK_CLOSE(g1 - g0, dur * 1.5, 1e-12, 0);
  /* a GEMM straddling the end of the comm interval: slowed only for the overlapped part */
  fb_op_cost big = gemm(16384, 16384, 16384);
  double bdur = fb_cost_seconds(&hw, &big, 64);
  double b0, b1;
  run_op(&s, s.comp, &big, &b0, &b1);
  CHECK_CLOSE(b0, g1, 1e-15, 0);
  double in_comm = (c1 - b0) / 1.5; /* work done while comm runs */
  CHECK(bdur > in_comm, "test setup: big gemm %g should outlast comm", bdur);
  CHECK_CLOSE(b1, c1 + (bdur - in_comm), 1e-12, 0);
  /* now a wait: compute after the event starts no earlier than the comm end */
  fb_op_cost ag2 = gather(INT64_C(1) << 26, 64);
  double a20, a21;
  run_op(&s, s.comm, &ag2, &a20, &a21);
  CHECK_CLOSE(a20, c1, 1e-15, 0); /* stream order on comm */
  CHECK_OK(fb_event_record(d, s.e, s.comm));
  CHECK_OK(fb_stream_wait(d, s.comp, s.e));
  double w0, w1;
  run_op(&s, s.comp, &g, &w0, &w1);
  CHECK(w0 >= a21, "compute after wait starts at %g before comm end %g", w0, a21);
  CHECK_CLOSE(w1 - w0, dur, 1e-12, 0); /* nothing overlaps any more: full speed */
  CHECK_CLOSE(fb_now(d), w1, 1e-15, 0);
  /* host sync on the comm stream moves now() to its end */
  run_op(&s, s.comm, &ag2, &a20, &a21);
  CHECK(fb_now(d) < a21, "now %g already past the comm end %g", fb_now(d), a21);
  CHECK_OK(fb_stream_sync(d, s.comm));
  CHECK_CLOSE(fb_now(d), a21, 1e-15, 0);
  /* event_sync: the host waits for the event's time */
  run_op(&s, s.comm, &ag2, &a20, &a21);
  CHECK_OK(fb_event_record(d, s.e, s.comm));
  CHECK_OK(fb_event_sync(d, s.e));
  CHECK_CLOSE(fb_now(d), a21, 1e-15, 0);
  /* memset and copies advance their stream by a memory-bound cost */
  double m0 = fb_now(d);
  CHECK_OK(fb_memset0(d, s.comp, (void *)0x1000, 1 << 30));
  CHECK_CLOSE(fb_now(d) - m0, hw.launch_s + (double)(1 << 30) / (hw.mem_bw * hw.mem_eff), 1e-12, 0);
  m0 = fb_now(d);
  CHECK_OK(fb_copy_d2d(d, s.comp, (void *)0x1000, (void *)0x2000, 1 << 30));
  CHECK_CLOSE(fb_now(d) - m0, hw.launch_s + 2.0 * (1 << 30) / (hw.mem_bw * hw.mem_eff), 1e-12, 0);
  close_sim(&s);
}

/* The GPU mechanisms on the timeline: a GEMM inside a busy comm interval takes its contention
 * slowdown (SMs and HBM beside NCCL), one after it takes the slowest of 64 ranks' time, a
 * collective on a compute stream neither. */
static void check_contention(const fb_hardware *h100) {
  fb_hardware hw = *h100;
  CHECK(hw.nccl_contention && hw.rank_speed_sigma > 0, "h100 profile: the mechanisms are on");
  sim s;
  if (!open_sim(&hw, 64, &s)) return;
  fb_op_cost ag = gather(INT64_C(1) << 26, 64);
  double c0, c1, g0, g1, a0, a1;
  run_op(&s, s.comm, &ag, &c0, &c1);
  fb_op_cost g = gemm(4096, 4096, 4096); /* many waves: fewer SMs cost time */
  const double dur = fb_cost_seconds(&hw, &g, 64), straggle = fb_straggler_factor(&hw, 64);
  const double slow = fb_contention_slowdown(&hw, &g, 64);
  CHECK(slow > 1.05 && straggle > 1.01, "setup: slowdown %g, straggler %g", slow, straggle);
  run_op(&s, s.comp, &g, &g0, &g1);
  CHECK(g1 < c1, "setup: the GEMM ends inside the comm interval");
  CHECK_CLOSE(g1 - g0, dur * straggle * slow, 1e-12, 0);
  CHECK_OK(fb_event_record(s.d, s.e, s.comm));
  CHECK_OK(fb_stream_wait(s.d, s.comp, s.e));
  run_op(&s, s.comp, &g, &g0, &g1);
  CHECK_CLOSE(g1 - g0, dur * straggle, 1e-12, 0);
  run_op(&s, s.comp, &ag, &a0, &a1);
  CHECK_CLOSE(a1 - a0, fb_cost_seconds(&hw, &ag, 64), 1e-12, 0);
  close_sim(&s);
}

/* host_runs_ahead = false (cpu executor): a comm op issued after a compute op cannot start
 * before the host (= the compute stream) gets there. true (GPU): it starts when its stream is
 * free. */
static void check_host_modes(const fb_hardware *h100) {
  for (int ahead = 0; ahead < 2; ahead++) {
    fb_hardware hw = *h100;
    hw.host_runs_ahead = ahead;
    sim s;
    if (!open_sim(&hw, 8, &s)) return;
    fb_op_cost g = gemm(4096, 4096, 4096);
    double g0, g1, c0, c1;
    run_op(&s, s.comp, &g, &g0, &g1);
    fb_op_cost ag = gather(1 << 20, 8);
    run_op(&s, s.comm, &ag, &c0, &c1);
    if (ahead)
      CHECK(c0 == 0, "host ahead: comm should start at 0, starts at %g", c0);
    else
      CHECK_CLOSE(c0, g1, 1e-15, 0);
    close_sim(&s);
  }
}

/* The same alloc/free sequence counts the same on sim as on cpu. */
static void check_alloc_matches_cpu(const fb_hardware *hw) {
  const fb_device_ops *cpu = fb_device_lookup("cpu"), *simops = fb_device_lookup("sim");
  CHECK(cpu && simops, "cpu or sim not registered");
  if (!cpu || !simops) return;
  fb_device *dc = NULL, *ds = NULL;
  CHECK_OK(fb_device_open(cpu, 0, 1, 1, 0, hw, &dc));
  CHECK_OK(fb_device_open(simops, 0, 1, 1, 0, hw, &ds));
  if (!dc || !ds) return;
  enum { N = 40 };
  fb_buf bc[N], bs[N];
  for (int i = 0; i < N; i++) {
    size_t bytes = (size_t)(i * 7919 % 1000 + 1) * 1024;
    fb_mem_cat cat = (fb_mem_cat)(i % FB_MEM_NCAT);
    CHECK_OK(fb_alloc(dc, bytes, cat, "test", &bc[i]));
    CHECK_OK(fb_alloc(ds, bytes, cat, "test", &bs[i]));
    CHECK(bs[i].ptr != NULL, "sim pointer NULL");
    for (int j = 0; j < i; j++)
      if (bs[j].ptr) CHECK(bs[j].ptr != bs[i].ptr, "sim tokens %d and %d equal", i, j);
    if (i % 3 == 2) { /* free an earlier one */
      fb_free(dc, &bc[i - 1], NULL);
      fb_free(ds, &bs[i - 1], NULL);
    }
  }
  for (int i = 0; i < N; i += 2) {
    fb_free(dc, &bc[i], NULL);
    fb_free(ds, &bs[i], NULL);
  }
  const fb_mem_stats *a = &dc->mem, *b = &ds->mem;
  CHECK(a->cur_total == b->cur_total && a->peak_total == b->peak_total, "total cur %lld/%lld peak "
        "%lld/%lld", (long long)a->cur_total, (long long)b->cur_total, (long long)a->peak_total,
        (long long)b->peak_total);
  for (int c = 0; c < FB_MEM_NCAT; c++)
    CHECK(a->cur[c] == b->cur[c] && a->peak[c] == b->peak[c] && a->at_peak[c] == b->at_peak[c],
          "category %d differs", c);
  CHECK(a->n_alloc == b->n_alloc && a->n_free == b->n_free, "alloc/free counts differ");
  CHECK(b->peak_total > 0, "nothing counted");
  for (int i = 0; i < N; i++) {
    fb_free(dc, &bc[i], NULL);
    fb_free(ds, &bs[i], NULL);
  }
  fb_device_close(dc);
  fb_device_close(ds);
}

/* A synthetic FSDP-like step: per layer, gather (comm, ahead) -> event -> compute waits ->
 * GEMMs; then reduce-scatter after. Returns the step's end time. */
static double fake_step(const fb_hardware *hw, int world, int layers, double *wall_s) {
  sim s;
  if (!open_sim(hw, world, &s)) return NAN;
  fb_device *d = s.d;
  fb_event *done[2];
  CHECK_OK(d->ops->event_create(d, &done[0]));
  CHECK_OK(d->ops->event_create(d, &done[1]));
  double t_start = wall();
  fb_op_cost ag = gather((INT64_C(1) << 29) / world, world);
  fb_op_cost rs = {.kind = FB_OP_COLL, .coll = FB_COLL_REDUCE_SCATTER,
                   .count = (INT64_C(1) << 29) / world, .dtype = FB_F32, .world = world};
  fb_op_cost g = gemm(8192, 8192, 2048);
  for (int step = 0; step < 2; step++) {
    d->ops->account(d, s.comm, &ag);
    CHECK_OK(fb_event_record(d, done[0], s.comm));
    for (int l = 0; l < layers; l++) {
      CHECK_OK(fb_stream_wait(d, s.comp, done[l & 1]));
      if (l + 1 < layers) { /* prefetch the next layer */
        d->ops->account(d, s.comm, &ag);
        CHECK_OK(fb_event_record(d, done[(l + 1) & 1], s.comm));
      }
      for (int i = 0; i < 6; i++) d->ops->account(d, s.comp, &g);
      CHECK_OK(fb_event_record(d, s.e, s.comp));
      CHECK_OK(fb_stream_wait(d, s.comm, s.e));
      d->ops->account(d, s.comm, &rs);
    }
    CHECK_OK(fb_stream_sync(d, s.comm));
    CHECK_OK(fb_stream_sync(d, s.comp));
  }
  *wall_s = wall() - t_start;
  double end = fb_now(d);
  d->ops->event_destroy(d, done[0]);
  d->ops->event_destroy(d, done[1]);
  close_sim(&s);
  return end;
}

static void check_step_monotonic(const fb_hardware *h100) {
  double w;
  for (int world = 8; world <= 1024; world *= 8) {
    double base = fake_step(h100, world, 8, &w);
    for (int which = 0; which < 3; which++) {
      fb_hardware f = *h100;
      if (which == 0) f.inter_bw *= 2;
      if (which == 1) f.intra_bw *= 2;
      if (which == 2) f.peak_bf16 *= 2;
      double fast = fake_step(&f, world, 8, &w);
      CHECK(fast <= base * (1 + 1e-12), "W=%d: faster hardware %d made the step slower: %g > %g",
            world, which, fast, base);
    }
    fb_hardware f = *h100;
    f.overlap_slowdown = 1.0;
    f.nccl_contention = false;
    double no_slow = fake_step(&f, world, 8, &w);
    CHECK(no_slow <= base, "W=%d: no overlap slowdown is slower %g > %g", world, no_slow, base);
  }
  /* bounded cost: 80 layers x 2 steps x ~10 ops in well under a second, and it scales */
  double end = fake_step(h100, 1024, 80, &w);
  CHECK(end > 0 && w < 0.5, "80-layer fake step took %g s of wall time", w);
  double w_long;
  fake_step(h100, 1024, 8000, &w_long);
  CHECK(w_long < 2.0, "8000-layer fake step took %g s (per-op cost must stay flat)", w_long);
}

/* Over one rank the wrappers tell an in-place call (this rank's part already where it goes)
 * from a copy: in place costs the call alone, out of place a device copy of the buffer. */
static void check_one_rank_in_place(const fb_hardware *hw) {
  sim s;
  if (!open_sim(hw, 1, &s)) return;
  fb_comm *c = NULL;
  CHECK_OK(fb_comm_sim_create(s.d, 0, 1, &c));
  if (!c) {
    close_sim(&s);
    return;
  }
  const size_t n = (size_t)64 << 20;
  char *a = (char *)0x10000000, *b = (char *)0x80000000;
  double t0 = fb_now(s.d);
  CHECK_OK(fb_all_reduce(c, s.comp, -1, a, a, n, FB_F32));
  CHECK_CLOSE(fb_now(s.d) - t0, hw->launch_s, 1e-12, 0);
  t0 = fb_now(s.d);
  CHECK_OK(fb_all_gather(c, s.comp, -1, a, a, n, FB_BF16));
  CHECK_OK(fb_reduce_scatter(c, s.comp, -1, a, a, n, FB_F32));
  CHECK_CLOSE(fb_now(s.d) - t0, 2 * hw->launch_s, 1e-12, 0);
  const double copy = 2.0 * 4.0 * (double)n / (hw->mem_bw * hw->mem_eff);
  t0 = fb_now(s.d);
  CHECK_OK(fb_all_reduce(c, s.comp, -1, a, b, n, FB_F32));
  CHECK(fb_now(s.d) - t0 >= copy, "out-of-place all-reduce over one rank: %g s, a copy is %g s",
        fb_now(s.d) - t0, copy);
  fb_comm_destroy(c);
  close_sim(&s);
}

static void check_comm_sim(const fb_hardware *hw) {
  sim s;
  if (!open_sim(hw, 16, &s)) return;
  fb_comm *c = NULL;
  CHECK_OK(fb_comm_sim_create(s.d, 3, 16, &c));
  if (!c) return;
  CHECK(fb_comm_lookup("sim") == c->ops, "registry does not return the sim table");
  /* the wrappers account the cost on the stream */
  double t0 = fb_now(s.d);
  CHECK_OK(fb_all_gather(c, s.comp, -1, (void *)0x1000, (void *)0x100000, 1 << 20, FB_BF16));
  fb_op_cost ag = gather(1 << 20, 16);
  CHECK_CLOSE(fb_now(s.d) - t0, fb_cost_seconds(hw, &ag, 16), 1e-12, 0);
  CHECK(fb_broadcast(c, s.comm, -1, (void *)0x1000, 10, FB_F32, 16) != FB_OK, "root 16 accepted");
  CHECK(fb_reduce(c, s.comm, -1, (void *)0x1000, NULL, 10, FB_F32, 0) == FB_OK,
        "non-root reduce without recv rejected");
  CHECK(fb_all_reduce(c, s.comm, -1, NULL, NULL, 10, FB_F32) != FB_OK, "NULL buffers accepted");
  CHECK(fb_all_reduce(c, s.comm, -1, NULL, NULL, 0, FB_F32) == FB_OK, "count 0 rejected");
  CHECK(fb_all_reduce(c, s.comm, -1, (void *)1, (void *)1, 4, FB_I32) != FB_OK, "i32 accepted");
  fb_comm *bad = NULL;
  CHECK(fb_comm_sim_create(s.d, 16, 16, &bad) == FB_EUSAGE, "rank 16 of 16 accepted");
  fb_comm_destroy(c);
  close_sim(&s);
  check_one_rank_in_place(hw);
  /* the sim device refuses to open without a profile */
  fb_device *d = NULL;
  CHECK(fb_device_open(fb_device_lookup("sim"), 0, 1, 1, 0, NULL, &d) == FB_EUSAGE,
        "sim opened without a hardware profile");
}

/* A named memset or copy (fb_k_memset0 / fb_k_copy: "zero_grad", "flat_grad_cat") is priced at
 * its caller's name's measured rate where the profile has one, else as the device's plain
 * memset0 / copy_d2d: the in-step calibration measures those ops under the caller's name. */
static void add_kernel(fb_hardware *hw, const char *name, double bw) {
  snprintf(hw->kernels[hw->nkernels].name, sizeof hw->kernels[0].name, "%s", name);
  hw->kernels[hw->nkernels++].bw = bw;
}

static void check_named_raw_ops(const fb_hardware *h100) {
  fb_hardware hw = *h100;
  hw.rank_speed_sigma = 0;
  const double bytes = 64e6;
  for (int with = 0; with < 2; with++) {
    hw.nkernels = 0;
    add_kernel(&hw, "memset0", 100e9);
    add_kernel(&hw, "copy_d2d", 200e9);
    if (with) {
      add_kernel(&hw, "zero_grad", 10e9);
      add_kernel(&hw, "flat_grad_cat", 20e9);
    }
    sim s;
    if (!open_sim(&hw, 1, &s)) return;
    const fb_kctx k = {.dev = s.d, .s = s.comp, .act = FB_F32, .unit = -1};
    double t0 = fb_now(s.d);
    CHECK_OK(fb_k_memset0(&k, "zero_grad", NULL, (size_t)bytes));
    CHECK_OK(fb_stream_sync(s.d, s.comp));
    double t1 = fb_now(s.d);
    CHECK_OK(fb_k_copy(&k, "flat_grad_cat", NULL, NULL, (size_t)bytes));
    CHECK_OK(fb_stream_sync(s.d, s.comp));
    double t2 = fb_now(s.d);
    /* memset: the bytes it writes; copy: read + write */
    CHECK_CLOSE(t1 - t0, hw.launch_s + bytes / (with ? 10e9 : 100e9), 1e-9, 0);
    CHECK_CLOSE(t2 - t1, hw.launch_s + 2 * bytes / (with ? 20e9 : 200e9), 1e-9, 0);
    close_sim(&s);
  }
}

/* rank_jitter: a collective waits E[max of N normals] * jitter * the compute issued since the
 * ranks met, less what earlier collectives waited; a binding wait for a collective is a
 * meeting; a wait that does not bind is not; world 1 and jitter 0 wait for no one. */
static void check_drift(const fb_hardware *h100) {
  fb_hardware hw = *h100;
  hw.nccl_contention = false;
  hw.overlap_slowdown = 1;
  hw.rank_speed_sigma = 0;
  hw.rank_jitter = 0.2;
  const int W = 8;
  const double f = 0.2 * fb_expected_max_normal(W);
  CHECK(f > 0.2 && f < 0.4, "E[max of 8] * 0.2 = %g", f);
  fb_op_cost g = gemm(4096, 4096, 4096), ag = gather(1024, W);
  const double cg = fb_cost_seconds(&hw, &g, W), ca = fb_cost_seconds(&hw, &ag, W);
  for (int world = 1; world <= W; world += W - 1) {
    sim s;
    if (!open_sim(&hw, world, &s)) return;
    const double fw = world > 1 ? f : 0, caw = fb_cost_seconds(&hw, &ag, world);
    double t0, t1;
    run_op(&s, s.comp, &g, &t0, &t1);
    run_op(&s, s.comp, &g, &t0, &t1); /* 2 cg of compute since the start */
    run_op(&s, s.comm, &ag, &t0, &t1);
    CHECK_CLOSE(t1 - t0, caw + fw * 2 * cg, 1e-9, 0);
    run_op(&s, s.comm, &ag, &t0, &t1); /* no more compute: the ranks drifted no further */
    CHECK_CLOSE(t1 - t0, caw, 1e-9, 0);
    run_op(&s, s.comp, &g, &t0, &t1);
    run_op(&s, s.comm, &ag, &t0, &t1); /* one cg more since the start: its share only */
    CHECK_CLOSE(t1 - t0, caw + fw * cg, 1e-9, 0);
    /* a wait that binds (the comm ends after the compute clock): the ranks meet */
    CHECK_OK(fb_event_record(s.d, s.e, s.comm));
    CHECK_OK(fb_stream_wait(s.d, s.comp, s.e));
    run_op(&s, s.comm, &ag, &t0, &t1);
    CHECK_CLOSE(t1 - t0, caw, 1e-9, 0);
    /* a wait that does not bind (compute already past the comm's end): no meeting */
    run_op(&s, s.comp, &g, &t0, &t1);
    run_op(&s, s.comp, &g, &t0, &t1);
    CHECK_OK(fb_event_record(s.d, s.e, s.comm));
    CHECK_OK(fb_stream_wait(s.d, s.comp, s.e));
    run_op(&s, s.comm, &ag, &t0, &t1);
    CHECK_CLOSE(t1 - t0, caw + fw * 2 * cg, 1e-9, 0);
    close_sim(&s);
  }
  (void)ca;
  /* jitter 0: lock-step, no wait */
  hw.rank_jitter = 0;
  sim s;
  if (!open_sim(&hw, W, &s)) return;
  double t0, t1;
  run_op(&s, s.comp, &g, &t0, &t1);
  run_op(&s, s.comm, &ag, &t0, &t1);
  CHECK_CLOSE(t1 - t0, ca, 1e-9, 0);
  close_sim(&s);
}

int main(void) {
  fb_hardware h100;
  fb_status st = fb_hardware_load("h100", &h100);
  CHECK(st == FB_OK, "load h100: %s", fb_error_msg());
  if (st != FB_OK) return fb_test_done("test_sim_device");
  /* the stream and event rules on their own: no host dispatch time (test_sim_host has it) */
  h100.host_op_s = 0;
  check_overlap(&h100);
  check_contention(&h100);
  check_host_modes(&h100);
  check_alloc_matches_cpu(&h100);
  check_step_monotonic(&h100);
  check_comm_sim(&h100);
  check_named_raw_ops(&h100);
  check_drift(&h100);
  return fb_test_done("test_sim_device");
}
