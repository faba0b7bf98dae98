/* Calibrating a communicator (see calibrate_comm.h): the timing loop and the GEMM spinner that
 * the local and MPI calibrations share, the fit that inverts the cost model, and the local
 * communicator's measurement (2 rank threads of this process, each with its own cpu device).
 *
 * The fit reads the model's latency and bandwidth terms off fb_cost_collective itself (the
 * cost of a collective is launch + a * lat + b / bw, linear in lat and 1 / bw, whichever
 * algorithm hw->collectives names): a = the cost with lat = 1 s and an infinite link, b = the
 * cost with no latency and a 1 B/s link. So calibration and prediction cannot disagree on a
 * formula. It does not measure compute (calibrate.c, calibrate_steps.c). */
#define _GNU_SOURCE
#include "calibrate_comm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/device/device.h"
#include "../engine/backends/cpu/device_cpu.h"
#include "../engine/device/kernels.h"
#include "../engine/ops/blas.h"
#include "../engine/sim/cost_model.h"
#include "../engine/backends/registry.h"
#include "median.h"

const fb_coll fb_calib_colls[FB_CALIB_NCOLLS] = {FB_COLL_ALL_GATHER, FB_COLL_REDUCE_SCATTER,
                                                 FB_COLL_ALL_REDUCE};
const size_t fb_calib_counts[FB_CALIB_NSIZES] = {1, 1024, 65536, 1 << 20, 4 << 20};

double fb_calib_lower_quartile(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, fb_cmp_double);
  return v[(n - 1) / 4];
}

/* ---- timing ------------------------------------------------------------------------------- */

fb_status fb_calib_time_collectives(fb_comm *comm, fb_stream *s, int reps, fb_calib_meet_fn meet,
                                    void *ctx, fb_calib_times out) {
  fb_device *d = comm->dev;
  const int W = comm->world;
  const size_t maxc = fb_calib_counts[FB_CALIB_NSIZES - 1];
  fb_status st = FB_OK;
  fb_buf send = {0}, recv = {0};
  double *t = malloc(sizeof *t * (size_t)reps);
  if (!t) return FB_ERR(FB_ENOMEM, "calibrate: out of host memory");
  FB_CHECK_GOTO(st, fb_alloc(d, (size_t)W * maxc * 4, FB_MEM_COMM, "calib.send", &send), out);
  FB_CHECK_GOTO(st, fb_alloc(d, (size_t)W * maxc * 4, FB_MEM_COMM, "calib.recv", &recv), out);
  FB_CHECK_GOTO(st, fb_memset0(d, s, send.ptr, send.bytes), out);
  FB_CHECK_GOTO(st, fb_memset0(d, s, recv.ptr, recv.bytes), out);
  FB_CHECK_GOTO(st, fb_stream_sync(d, s), out);
  for (int ci = 0; ci < FB_CALIB_NCOLLS; ci++)
    for (int si = 0; si < FB_CALIB_NSIZES; si++) {
      const size_t count = fb_calib_counts[si];
      for (int rep = 0; rep <= reps; rep++) { /* rep 0 warms up */
        FB_CHECK_GOTO(st, meet(ctx), out);
        double t0 = fb_cpu_clock();
        switch (fb_calib_colls[ci]) {
        case FB_COLL_ALL_GATHER:
          st = fb_all_gather(comm, s, -1, send.ptr, recv.ptr, count, FB_F32);
          break;
        case FB_COLL_REDUCE_SCATTER:
          st = fb_reduce_scatter(comm, s, -1, send.ptr, recv.ptr, count, FB_F32);
          break;
        default:
          st = fb_all_reduce(comm, s, -1, send.ptr, recv.ptr, (size_t)W * count, FB_F32);
          break;
        }
        if (st == FB_OK) st = fb_stream_sync(d, s);
        if (st != FB_OK) goto out; /* the peers time out and report too */
        if (rep > 0) t[rep - 1] = fb_cpu_clock() - t0;
      }
      out[ci][si] = fb_calib_lower_quartile(t, reps);
    }
out:
  fb_stream_sync(d, s);
  fb_free(d, &send, NULL);
  fb_free(d, &recv, NULL);
  free(t);
  return st;
}

/* ---- the GEMM spinner --------------------------------------------------------------------- */

static void *spin_main(void *p) {
  fb_calib_spinner *sp = p;
  enum { N = 256, C = 768, OC = 768 };
  fb_device *d = NULL;
  fb_stream *s = NULL;
  fb_buf out = {0}, inp = {0}, w = {0};
  fb_blas_set_threads(1); /* one compute thread per rank, as at 2 ranks on 2 cores */
  sp->st = fb_device_open(fb_device_lookup("cpu"), 0, 1, 1, 0, NULL, &d);
  if (sp->st != FB_OK) return NULL;
  if ((sp->st = d->ops->stream_create(d, FB_STREAM_COMPUTE, &s)) == FB_OK &&
      (sp->st = fb_alloc(d, (size_t)N * OC * 4, FB_MEM_TEMP, "calib.spin", &out)) == FB_OK &&
      (sp->st = fb_alloc(d, (size_t)N * C * 4, FB_MEM_TEMP, "calib.spin", &inp)) == FB_OK &&
      (sp->st = fb_alloc(d, (size_t)C * OC * 4, FB_MEM_TEMP, "calib.spin", &w)) == FB_OK &&
      (sp->st = fb_memset0(d, s, inp.ptr, inp.bytes)) == FB_OK &&
      (sp->st = fb_memset0(d, s, w.ptr, w.bytes)) == FB_OK) {
    fb_kctx k = {.dev = d, .s = s, .act = FB_F32, .unit = -1};
    while (!sp->stop && sp->st == FB_OK)
      sp->st = fb_k_matmul_fwd(&k, out.ptr, inp.ptr, w.ptr, NULL, N, C, OC);
  }
  fb_free(d, &out, NULL);
  fb_free(d, &inp, NULL);
  fb_free(d, &w, NULL);
  if (s) d->ops->stream_destroy(d, s);
  fb_device_close(d);
  return NULL;
}

fb_status fb_calib_spinner_start(fb_calib_spinner *sp) {
  *sp = (fb_calib_spinner){0};
  if (pthread_create(&sp->th, NULL, spin_main, sp) != 0)
    return FB_ERR(FB_EINTERNAL, "calibrate: cannot start a compute thread");
  sp->started = true;
  return FB_OK;
}

fb_status fb_calib_spinner_stop(fb_calib_spinner *sp) {
  if (!sp->started) return FB_OK;
  sp->stop = 1;
  pthread_join(sp->th, NULL);
  sp->started = false;
  return sp->st;
}

/* ---- the fit ---------------------------------------------------------------------------------- */

/* Payload (cost-model convention) of a calibration collective of per-rank `count` at W. */
static double payload(size_t count, int world) { return (double)count * world * 4.0; }

/* The model's terms for one collective: cost = launch + a * lat + b / bw. */
static void model_terms(const fb_hardware *hw, fb_coll c, double bytes, int world, double *a,
                        double *b) {
  fb_hardware u = *hw;
  u.launch_s = 0;
  u.coll_eff = 1;
  u.intra_lat = u.inter_lat = 1;
  u.intra_bw = u.inter_bw = 1e300;
  *a = fb_cost_collective(&u, c, bytes, world);
  u.intra_lat = u.inter_lat = 0;
  u.intra_bw = u.inter_bw = 1;
  *b = fb_cost_collective(&u, c, bytes, world);
}

/* bw for t(S) = t0 + b(S) / bw over the points after the first (the first is t0's),
 * least squares on log t over a log grid of bw in [FB_CALIB_BW_MIN, FB_CALIB_BW_MAX]. */
static double fit_bandwidth(const double *t, const double *b, int n, double t0) {
  double best = 1e9, best_err = INFINITY;
  for (double bw = FB_CALIB_BW_MIN; bw <= FB_CALIB_BW_MAX; bw *= 1.02) {
    double err = 0;
    for (int i = 1; i < n; i++) {
      double r = log(t[i]) - log(t0 + b[i] / bw);
      err += r * r;
    }
    if (err < best_err) {
      best_err = err;
      best = bw;
    }
  }
  return best;
}

/* Sizes whose time is latency: payloads under 64 KiB (8 B and 8 KiB here). */
static bool latency_size(int si, int world) { return payload(fb_calib_counts[si], world) < 65536; }

/* Per collective: the latency from the small sizes (the mean of their (t - launch) / a; under
 * compute the small collectives' times are bimodal, a hand-off that waited for the CPU or
 * not), the bandwidth over the payloads of a MiB and more, and that bandwidth fit's relative
 * RMS residual (the latency's bimodal sizes are not in it: their mean is the figure by
 * design). */
static void fit_one(const fb_hardware *hw, int world, const fb_calib_times t, double lat[],
                    double bw[], double rms[]) {
  for (int ci = 0; ci < FB_CALIB_NCOLLS; ci++) {
    double tt[FB_CALIB_NSIZES + 1], bb[FB_CALIB_NSIZES + 1], a, b, lsum = 0, t_small = 0;
    int n = 1, nl = 0;
    for (int si = 0; si < FB_CALIB_NSIZES; si++) {
      double p = payload(fb_calib_counts[si], world);
      model_terms(hw, fb_calib_colls[ci], p, world, &a, &b);
      if (latency_size(si, world)) {
        lsum += a > 0 ? fmax(0.0, t[ci][si] - hw->launch_s) / a : 0;
        t_small += t[ci][si];
        nl++;
      } else if (p >= (1 << 20)) {
        tt[n] = t[ci][si];
        bb[n++] = b;
      }
    }
    lat[ci] = nl ? lsum / nl : 0;
    tt[0] = t_small / (nl ? nl : 1); /* the fit's t0: the latency part of every size */
    bw[ci] = fit_bandwidth(tt, bb, n, tt[0]);
    double sq = 0;
    for (int i = 1; i < n; i++) {
      double r = (tt[0] + bb[i] / bw[ci]) / tt[i] - 1;
      sq += r * r;
    }
    rms[ci] = n > 1 ? sqrt(sq / (n - 1)) : 0;
  }
}

static double median3(const double v[3]) {
  double s[3] = {v[0], v[1], v[2]};
  return fb_median(s, 3);
}

/* Index of the median of three (ties: any one of the tied values). */
static int median3_index(const double v[3]) {
  int lo = 0, hi = 0;
  for (int i = 1; i < 3; i++) {
    if (v[i] < v[lo]) lo = i;
    if (v[i] >= v[hi]) hi = i;
  }
  return lo == hi ? 0 : 3 - lo - hi;
}

double fb_calib_fit_comm(fb_hardware *hw, int world, const fb_calib_times idle,
                         const fb_calib_times busy, const char *what, bool quiet) {
  double lat[3], bw[3], rms[3], blat[3], bbw[3], brms[3];
  fit_one(hw, world, idle, lat, bw, rms);
  fit_one(hw, world, busy, blat, bbw, brms);
  /* A step issues its collectives beside compute, and on a shared host the two share the
   * cores: the profile's links are the communicator as measured under compute. */
  hw->intra_lat = hw->inter_lat = median3(blat);
  hw->intra_bw = hw->inter_bw = median3(bbw);
  hw->coll_eff = 1.0; /* the fitted bandwidth is already the achieved one */
  const double fit_rms = brms[median3_index(bbw)];
  if (quiet) return fit_rms;
  printf("\n  %s, %d ranks, fp32, idle and while each rank also runs GEMMs on a compute thread "
         "(as in a step);\n  model (collectives: %s) fitted to the busy times\n", what, world,
         hw->collectives == FB_COLLS_SHARED_MEMORY ? "shared_memory" : "ring_tree");
  printf("  %-15s %12s %12s %12s %9s\n", "collective", "bytes", "idle us", "busy us", "model us");
  for (int ci = 0; ci < FB_CALIB_NCOLLS; ci++)
    for (int si = 0; si < FB_CALIB_NSIZES; si++) {
      double p = payload(fb_calib_counts[si], world);
      printf("  %-15s %12.0f %12.1f %12.1f %9.1f\n", fb_coll_name(fb_calib_colls[ci]), p,
             idle[ci][si] * 1e6, busy[ci][si] * 1e6,
             fb_cost_collective(hw, fb_calib_colls[ci], p, world) * 1e6);
    }
  for (int b = 0; b < 2; b++)
    printf("  lat us / GB/s (fit rms %%)  %s: all_gather %.1f / %.2f (%.0f), reduce_scatter %.1f "
           "/ %.2f (%.0f), all_reduce %.1f / %.2f (%.0f)%s\n", b ? "busy" : "idle",
           (b ? blat : lat)[0] * 1e6, (b ? bbw : bw)[0] * 1e-9, 100 * (b ? brms : rms)[0],
           (b ? blat : lat)[1] * 1e6, (b ? bbw : bw)[1] * 1e-9, 100 * (b ? brms : rms)[1],
           (b ? blat : lat)[2] * 1e6, (b ? bbw : bw)[2] * 1e-9, 100 * (b ? brms : rms)[2],
           b ? " -> the medians (profile)" : "");
  return fit_rms;
}

/* ---- rank threads: the local communicator, and NCCL between a process's GPUs ------------ */

enum { LOCAL_W = 2, MAX_W = 16 };

typedef struct comm_bench {
  const char *backend;
  int world, reps;
  fb_calib_comm_make make;
  void *ctx;
  pthread_barrier_t bar;
  fb_calib_times t; /* rank 0's */
  fb_status st[MAX_W];
  char msg[MAX_W][256];
} comm_bench;

typedef struct comm_rank {
  comm_bench *b;
  int rank;
} comm_rank;

static fb_status bench_meet(void *ctx) {
  pthread_barrier_wait(&((comm_bench *)ctx)->bar);
  return FB_OK;
}

static void *comm_rank_main(void *p) {
  comm_rank *r = p;
  comm_bench *b = r->b;
  fb_status st = FB_OK;
  fb_device *d = NULL;
  fb_comm *comm = NULL;
  fb_stream *s = NULL;
  fb_calib_times t;
  const fb_device_ops *ops = fb_device_lookup(b->backend);
  if (!ops) {
    st = FB_ERR(FB_EUNSUPPORTED, "calibrate: backend '%s' is not available", b->backend);
    goto out;
  }
  FB_CHECK_GOTO(st, fb_device_open(ops, r->rank, b->world, 1, 0, NULL, &d), out);
  FB_CHECK_GOTO(st, d->ops->stream_create(d, FB_STREAM_COMM, &s), out);
  FB_CHECK_GOTO(st, b->make(b->ctx, r->rank, d, &comm), out);
  FB_CHECK_GOTO(st, fb_calib_time_collectives(comm, s, b->reps, bench_meet, b, t), out);
  if (r->rank == 0) memcpy(b->t, t, sizeof t);
out:
  if (st != FB_OK) snprintf(b->msg[r->rank], sizeof b->msg[r->rank], "%s", fb_error_msg());
  b->st[r->rank] = st;
  if (comm) fb_comm_destroy(comm);
  if (s) d->ops->stream_destroy(d, s);
  if (d) fb_device_close(d);
  return NULL;
}

/* Runs the rank threads of one pass and collects their outcome. */
static fb_status run_ranks(comm_bench *b) {
  pthread_barrier_init(&b->bar, NULL, (unsigned)b->world);
  pthread_t th[MAX_W];
  comm_rank cr[MAX_W];
  int started = 0;
  for (int r = 0; r < b->world; r++) {
    cr[r] = (comm_rank){b, r};
    if (pthread_create(&th[r], NULL, comm_rank_main, &cr[r]) == 0) started++;
  }
  for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&b->bar);
  if (started < b->world) return FB_ERR(FB_EINTERNAL, "calibrate: cannot start the rank threads");
  for (int r = 0; r < b->world; r++)
    if (b->st[r] != FB_OK)
      return FB_ERR(b->st[r], "calibrate: %s communicator, rank %d: %s", b->backend, r, b->msg[r]);
  return FB_OK;
}

fb_status fb_calib_comm_pass(const char *backend, int world, int reps, bool busy,
                             fb_calib_comm_make make, void *ctx, fb_calib_times out) {
  if (world < 2 || world > MAX_W)
    return FB_ERR(FB_EUSAGE, "calibrate: %d rank threads: allowed 2 to %d", world, MAX_W);
  fb_status st = FB_OK;
  fb_calib_spinner sp[MAX_W] = {{0}};
  comm_bench *b = calloc(1, sizeof *b);
  if (!b) return FB_ERR(FB_ENOMEM, "calibrate: out of host memory");
  *b = (comm_bench){.backend = backend, .world = world, .reps = reps, .make = make, .ctx = ctx};
  for (int r = 0; busy && r < world; r++) FB_CHECK_GOTO(st, fb_calib_spinner_start(&sp[r]), out);
  FB_CHECK_GOTO(st, run_ranks(b), out);
  memcpy(out, b->t, sizeof b->t);
out:
  for (int r = 0; r < world; r++) {
    fb_status s2 = fb_calib_spinner_stop(&sp[r]);
    if (st == FB_OK) st = s2;
  }
  free(b);
  return st;
}

static fb_status make_local(void *ctx, int rank, fb_device *dev, fb_comm **out) {
  return fb_comm_local_create((fb_local_group *)ctx, rank, dev, out);
}

/* One pass of the 2-rank local benchmark on `backend` devices (staged through host buffers
 * where the host may not touch them), with a GEMM thread per rank when busy. */
static fb_status local_pass(const char *backend, int reps, bool busy, fb_calib_times out) {
  fb_local_group *g = NULL;
  FB_TRY(fb_local_group_create(LOCAL_W, 30.0, &g));
  fb_status st = fb_calib_comm_pass(backend, LOCAL_W, reps, busy, make_local, g, out);
  fb_local_group_destroy(g);
  return st;
}

fb_status fb_calibrate_local_comm(fb_hardware *hw, const char *backend, bool quick, bool quiet,
                                  double *fit_rms) {
  fb_calib_times idle, busy;
  FB_TRY(local_pass(backend, quick ? 3 : 9, false, idle));
  FB_TRY(local_pass(backend, quick ? 3 : 9, true, busy));
  hw->shared_host = true;                  /* the ranks are threads of this one machine */
  hw->collectives = FB_COLLS_SHARED_MEMORY; /* and read each other's buffers */
  hw->devices_per_node = 1;
  double r = fb_calib_fit_comm(hw, LOCAL_W, idle, busy, "local communicator (threads)", quiet);
  if (fit_rms) *fit_rms = r;
  return FB_OK;
}
