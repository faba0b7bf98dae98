/* The sim device's host clock: each op issued costs the host host_op_s and starts no earlier
 * than the host time it was issued at (marks stamp its exact start and end); fb_host_work moves
 * the host clock and so delays what is issued after it on every stream; an event sync that
 * blocks is counted as a stall, a stream sync as a drain; on a profile whose host is the
 * compute stream (cpu executor) host work is not modelled and nothing changes; the cpu device
 * takes fb_host_work as a no-op. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "engine/device/device.h"
#include "engine/sim/cost_model.h"
#include "engine/sim/hardware.h"
#include "engine/backends/registry.h"

typedef struct sim {
  fb_device *d;
  fb_stream *comp, *comm;
} sim;

static int open_sim(const fb_hardware *hw, sim *s) {
  fb_status st = fb_device_open(fb_device_lookup("sim"), 0, 8, 1, 0, hw, &s->d);
  CHECK(st == FB_OK, "open sim: %s", fb_error_msg());
  if (st != FB_OK) return 0;
  CHECK_OK(s->d->ops->stream_create(s->d, FB_STREAM_COMPUTE, &s->comp));
  CHECK_OK(s->d->ops->stream_create(s->d, FB_STREAM_COMM, &s->comm));
  return 1;
}

static void close_sim(sim *s) {
  s->d->ops->stream_destroy(s->d, s->comm);
  s->d->ops->stream_destroy(s->d, s->comp);
  fb_device_close(s->d);
}

/* Accounts c on st between two marks, as the wrappers do. */
static void run_op(fb_device *d, fb_stream *st, const fb_op_cost *c, double *t0, double *t1) {
  uint64_t a = d->ops->mark(d, st);
  d->ops->account(d, st, c);
  uint64_t b = d->ops->mark(d, st);
  *t0 = d->ops->mark_time(d, a);
  *t1 = d->ops->mark_time(d, b);
}

static fb_op_cost tiny(void) { /* far shorter than the dispatch time below */
  return (fb_op_cost){.name = "memset0", .kind = FB_OP_MEM, .dtype = FB_F32, .bytes = 4};
}

static fb_op_cost big_gemm(void) {
  fb_op_cost c = {.name = "gemm", .kind = FB_OP_GEMM, .dtype = FB_BF16, .m = 8192, .n = 8192,
                  .k = 8192, .batch = 1};
  c.flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
  c.bytes = 3.0 * 2.0 * 8192.0 * 8192.0;
  return c;
}

static void check_dispatch(const fb_hardware *base) {
  fb_hardware hw = *base;
  hw.host_op_s = 50e-6;
  sim s;
  if (!open_sim(&hw, &s)) return;
  fb_device *d = s.d;
  const fb_op_cost t = tiny();
  const double dur = fb_cost_seconds(&hw, &t, 8);
  CHECK(dur < hw.host_op_s, "test setup: op %g s not shorter than dispatch", dur);
  /* host-bound: each op starts when the host has issued it, and the marks say exactly that */
  for (int k = 1; k <= 4; k++) {
    double a, b;
    run_op(d, s.comp, &t, &a, &b);
    CHECK_CLOSE(a, k * hw.host_op_s, 1e-12, 1e-15);
    CHECK_CLOSE(b, a + dur, 1e-12, 1e-15);
  }
  /* device-bound: a long op, then ops issued behind it start when it ends */
  const fb_op_cost g = big_gemm();
  double g0, g1, a, b;
  run_op(d, s.comp, &g, &g0, &g1);
  CHECK_CLOSE(g0, 5 * hw.host_op_s, 1e-12, 1e-15);
  run_op(d, s.comp, &t, &a, &b);
  CHECK_CLOSE(a, g1, 1e-12, 1e-15);
  /* another stream is held back by the host, not by the busy compute stream */
  run_op(d, s.comm, &t, &a, &b);
  CHECK_CLOSE(a, 7 * hw.host_op_s, 1e-12, 1e-15);
  fb_dev_model m;
  CHECK(d->ops->model_stats(d, &m) && m.host_model, "host model on a GPU profile");
  CHECK_CLOSE(m.host_busy_s, 7 * hw.host_op_s, 1e-12, 0);
  close_sim(&s);
}

static void check_host_work(const fb_hardware *base, bool gpu) {
  fb_hardware hw = *base;
  hw.host_op_s = 0;
  hw.host_runs_ahead = gpu;
  sim s;
  if (!open_sim(&hw, &s)) return;
  fb_device *d = s.d;
  const fb_op_cost t = tiny();
  fb_host_work(d, 2e-3, "test.hook");
  double a, b;
  run_op(d, s.comm, &t, &a, &b);
  if (gpu) {
    CHECK_CLOSE(a, 2e-3, 1e-12, 0); /* issued after the hook */
    fb_dev_model m;
    CHECK(d->ops->model_stats(d, &m), "model stats");
    CHECK_CLOSE(m.host_work_s, 2e-3, 1e-12, 0);
    CHECK_CLOSE(m.host_busy_s, 2e-3, 1e-12, 0);
  } else {
    CHECK(a == 0, "host is the compute stream: host work not modelled, op at %g", a);
    fb_dev_model m;
    CHECK(!d->ops->model_stats(d, &m), "no model on a cpu-style profile");
  }
  close_sim(&s);
}

static void check_waits(const fb_hardware *base) {
  fb_hardware hw = *base;
  hw.host_op_s = 0;
  sim s;
  if (!open_sim(&hw, &s)) return;
  fb_device *d = s.d;
  fb_event *e;
  CHECK_OK(d->ops->event_create(d, &e));
  const fb_op_cost g = big_gemm();
  double g0, g1;
  run_op(d, s.comp, &g, &g0, &g1);
  CHECK_OK(fb_event_record(d, e, s.comp));
  fb_host_work(d, 1e-3, "test.hook");
  CHECK_OK(fb_event_sync(d, e)); /* the host blocks until the GEMM ends */
  fb_dev_model m;
  d->ops->model_stats(d, &m);
  CHECK_CLOSE(m.host_wait_s, g1 - 1e-3, 1e-12, 0);
  CHECK(m.host_drain_s == 0, "no drain yet");
  /* after the stall the host issues at the GEMM's end: an op on comm starts there */
  const fb_op_cost t = tiny();
  double a, b;
  run_op(d, s.comm, &t, &a, &b);
  CHECK_CLOSE(a, g1, 1e-12, 0);
  run_op(d, s.comp, &g, &g0, &g1);
  CHECK_OK(fb_stream_sync(d, s.comp));
  d->ops->model_stats(d, &m);
  CHECK(m.host_drain_s > 0, "a stream sync that blocks is a drain");
  d->ops->event_destroy(d, e);
  close_sim(&s);
}

static void check_cpu_device(void) {
  fb_device *d;
  CHECK_OK(fb_device_open(fb_device_lookup("cpu"), 0, 1, 1, 0, NULL, &d));
  CHECK(d->ops->host_work != NULL, "cpu has a host_work entry");
  CHECK(d->ops->model_stats == NULL, "cpu models nothing");
  fb_host_work(d, 1.0, "ignored"); /* must not sleep a second */
  fb_stream *c;
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMPUTE, &c));
  fb_buf b;
  CHECK_OK(fb_alloc_on(d, c, 4096, FB_MEM_TEMP, "hint ignored", &b));
  CHECK(b.ptr != NULL && d->mem.cur_total == 4096, "cpu alloc with a stream hint");
  fb_free(d, &b, c);
  d->ops->stream_destroy(d, c);
  fb_device_close(d);
}

int main(void) {
  fb_hardware h100;
  fb_status st = fb_hardware_load("h100", &h100);
  CHECK(st == FB_OK, "load h100: %s", fb_error_msg());
  if (st == FB_OK) {
    CHECK(h100.host_runs_ahead, "h100 host runs ahead");
    /* the host's dispatch mechanics alone: an op lasts its own cost, not stretched by the
     * slowest of N ranks or by a resident collective (test_sim_device checks those) */
    h100.rank_speed_sigma = 0;
    h100.nccl_contention = false;
    check_dispatch(&h100);
    check_host_work(&h100, true);
    check_host_work(&h100, false);
    check_waits(&h100);
  }
  check_cpu_device();
  return fb_test_done("test_sim_host");
}
