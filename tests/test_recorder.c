/* Recorder unit test on a fake device whose timing tickets are doubles this test controls:
 * compute / comm unions and exposed communication on hand-made intervals (hidden, disjoint,
 * partial, overlapping ops), against a brute-force measure on random integer intervals, the
 * collective ledger, the traced-step schedule, memory events and baselines, spans, and
 * concurrent fb_recorder_op calls from two threads. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/device/recorder.h"

/* ---- the fake device: now() and tickets are values this test sets ---------------------- */
static double fake_now;
static double fake_ticket[1 << 16];
static int fake_resets;

static double f_now(fb_device *d) { (void)d; return fake_now; }
static uint64_t f_mark(fb_device *d, fb_stream *s) { (void)d; (void)s; return 0; }
static double f_mark_time(fb_device *d, uint64_t t) {
  (void)d;
  return fake_ticket[t];
}
static void f_marks_reset(fb_device *d) { (void)d; fake_resets++; }
static const fb_device_ops fake_ops = {.name = "fake", .now = f_now, .mark = f_mark,
                                       .mark_time = f_mark_time, .marks_reset = f_marks_reset};

static char s_compute_obj, s_comm_obj;
#define S_COMPUTE ((fb_stream *)&s_compute_obj)
#define S_COMM ((fb_stream *)&s_comm_obj)

static uint64_t next_ticket;
/* Records an op spanning [t0, t1] (seconds) on stream s. */
static void op(fb_recorder *r, fb_stream *s, fb_op_kind kind, double t0, double t1,
               double flops) {
  uint64_t k0 = next_ticket++, k1 = next_ticket++;
  fake_ticket[k0] = t0;
  fake_ticket[k1] = t1;
  fb_op_cost c = {.name = kind == FB_OP_COLL ? "coll" : "kernel", .kind = kind, .flops = flops};
  fb_recorder_op(r, s, &c, 3, k0, k1);
}
static void coll(fb_recorder *r, fb_coll cl, int64_t count, int world, double t0, double t1) {
  uint64_t k0 = next_ticket++, k1 = next_ticket++;
  fake_ticket[k0] = t0;
  fake_ticket[k1] = t1;
  fb_op_cost c = {.name = fb_coll_name(cl), .kind = FB_OP_COLL, .dtype = FB_F32, .coll = cl,
                  .count = count, .world = world};
  fb_recorder_op(r, S_COMM, &c, 1, k0, k1);
}

static fb_device fake_dev(int rank) {
  fb_device d;
  memset(&d, 0, sizeof d);
  d.ops = &fake_ops;
  d.rank = rank;
  d.world = 2;
  return d;
}

static void check_stats_sane(const fb_step_stats *s) {
  CHECK(s->exposed_comm >= 0 && s->exposed_comm <= s->comm + 1e-12, "exposed %g comm %g",
        s->exposed_comm, s->comm);
  double overlap = s->comm > 0 ? 1 - s->exposed_comm / s->comm : 0;
  CHECK(overlap >= 0 && overlap <= 1, "overlap %g", overlap);
  CHECK(s->compute <= s->wall + 1e-12 && s->comm <= s->wall + 1e-12, "wall %g", s->wall);
}

static void test_hand_made(void) {
  fb_device d = fake_dev(0);
  fb_rec_config cfg = {.trace = true, .trace_wait = 1, .trace_warmup = 1, .trace_active = 1};
  fb_recorder *r;
  CHECK_OK(fb_recorder_create(&d, &cfg, &r));
  CHECK(fb_recorder_stream(r, S_COMPUTE, "compute") == 0, "first track id");
  CHECK(fb_recorder_stream(r, S_COMM, "comm") == 1, "second track id");
  CHECK(fb_recorder_stream(r, S_COMPUTE, "compute") == 0, "re-registering keeps the id");
  fb_step_stats s;

  /* step 0: comm fully hidden behind compute */
  fake_now = 0;
  fb_recorder_step_begin(r, 0, 0);
  op(r, S_COMPUTE, FB_OP_GEMM, 0.0, 1.0, 100);
  op(r, S_COMPUTE, FB_OP_GEMM, 1.0, 3.0, 200);
  op(r, S_COMM, FB_OP_COLL, 0.5, 2.5, 0);
  fake_now = 2.0; /* host reaches step end before the last op's resolved end */
  int resets = fake_resets;
  CHECK_OK(fb_recorder_step_end(r, &s));
  CHECK(fake_resets == resets + 1, "marks_reset called once per step end");
  CHECK(s.step == 0, "step %d", s.step);
  CHECK_CLOSE(s.t_start, 0.0, 0, 1e-15);
  CHECK_CLOSE(s.t_end, 3.0, 0, 1e-15);
  CHECK_CLOSE(s.wall, 3.0, 0, 1e-15);
  CHECK_CLOSE(s.compute, 3.0, 0, 1e-15);
  CHECK_CLOSE(s.comm, 2.0, 0, 1e-15);
  CHECK_CLOSE(s.exposed_comm, 0.0, 0, 1e-15);
  CHECK_CLOSE(s.flops, 300, 0, 0);
  CHECK(s.n_ops == 3, "n_ops %d", s.n_ops);
  check_stats_sane(&s);

  /* step 1: disjoint -> everything exposed; the host clock ends the step after the ops */
  fake_now = 10;
  fb_recorder_step_begin(r, 1, 0);
  op(r, S_COMPUTE, FB_OP_GEMM, 10.0, 11.0, 1);
  op(r, S_COMM, FB_OP_COLL, 12.0, 13.0, 0);
  fake_now = 14.0;
  CHECK_OK(fb_recorder_step_end(r, &s));
  CHECK_CLOSE(s.wall, 4.0, 0, 1e-12);
  CHECK_CLOSE(s.compute, 1.0, 0, 1e-12);
  CHECK_CLOSE(s.comm, 1.0, 0, 1e-12);
  CHECK_CLOSE(s.exposed_comm, 1.0, 0, 1e-12);
  check_stats_sane(&s);

  /* step 2: partial overlap, overlapping comm ops, the ledger, a span (not counted) */
  fake_now = 20;
  fb_recorder_step_begin(r, 2, 0);
  op(r, S_COMPUTE, FB_OP_GEMM, 20.0, 22.0, 0);
  coll(r, FB_COLL_ALL_GATHER, 100, 4, 21.0, 23.0);
  coll(r, FB_COLL_ALL_REDUCE, 10, 4, 22.0, 24.0);
  coll(r, FB_COLL_ALL_GATHER, 100, 4, 23.5, 23.75);
  fb_recorder_span(r, "forward", 20.0, 24.0);
  fb_recorder_micro(r, 1);
  fake_now = 24.0;
  CHECK_OK(fb_recorder_step_end(r, &s));
  CHECK_CLOSE(s.compute, 2.0, 0, 1e-12);
  CHECK_CLOSE(s.comm, 3.0, 0, 1e-12);
  CHECK_CLOSE(s.exposed_comm, 2.0, 0, 1e-12);
  CHECK(s.n_ops == 4, "spans are not ops: n_ops %d", s.n_ops);
  CHECK_CLOSE(s.coll_bytes[FB_COLL_ALL_GATHER], 2 * 100 * 4 * 4, 0, 0);
  CHECK_CLOSE(s.wire_bytes[FB_COLL_ALL_GATHER], 2 * 3 * 100 * 4, 0, 1e-9);
  CHECK_CLOSE(s.coll_bytes[FB_COLL_ALL_REDUCE], 2 * 10 * 4, 0, 0);
  CHECK_CLOSE(s.wire_bytes[FB_COLL_ALL_REDUCE], 2.0 * 3 / 4 * 10 * 4, 0, 1e-9);
  CHECK_CLOSE(s.coll_time[FB_COLL_ALL_GATHER], 2.25, 0, 1e-12);
  CHECK_CLOSE(s.coll_time[FB_COLL_ALL_REDUCE], 2.0, 0, 1e-12);
  CHECK_CLOSE(s.coll_bytes[FB_COLL_REDUCE_SCATTER], 0, 0, 0);
  check_stats_sane(&s);

  /* step 3: after the active window: not traced */
  fake_now = 30;
  fb_recorder_step_begin(r, 3, 0);
  op(r, S_COMPUTE, FB_OP_GEMM, 30.0, 31.0, 0);
  CHECK_OK(fb_recorder_step_end(r, &s));

  /* The runner closes the device before the trace is written: accessors must not need it. */
  memset(&d, 0, sizeof d);
  d.rank = -1;
  /* Only step 2 was kept (wait 1, warm-up 1, active 1). */
  int64_t n;
  const fb_rec_op *ops = fb_recorder_ops(r, &n);
  CHECK(n == 5, "kept ops %lld (4 ops + 1 span of step 2)", (long long)n);
  int spans = 0;
  for (int64_t i = 0; i < n; i++) {
    CHECK(ops[i].step == 2, "kept op of step %d", ops[i].step);
    CHECK(ops[i].t1 >= ops[i].t0, "resolved interval");
    if (ops[i].kind == FB_OP_NKIND) {
      spans++;
      CHECK(!strcmp(fb_recorder_stream_name(r, ops[i].stream), "host"), "span track %s",
            fb_recorder_stream_name(r, ops[i].stream));
    }
  }
  CHECK(spans == 1, "spans kept %d", spans);
  CHECK(fb_recorder_nstreams(r) == 3, "compute, comm, host: %d", fb_recorder_nstreams(r));
  CHECK(!strcmp(fb_recorder_stream_name(r, 1), "comm"), "track name");
  CHECK(fb_recorder_rank(r) == 0, "rank");
  fb_recorder_destroy(r);
}

/* Measure of comm not covered by compute, by unit cells (integer endpoints). */
static void brute(const int (*iv)[3], int n, double *compute, double *comm, double *exposed) {
  *compute = *comm = *exposed = 0;
  for (int x = 0; x < 200; x++) {
    bool c = false, m = false;
    for (int i = 0; i < n; i++)
      if (iv[i][1] <= x && x + 1 <= iv[i][2]) {
        if (iv[i][0]) m = true;
        else c = true;
      }
    *compute += c;
    *comm += m;
    *exposed += m && !c;
  }
}

static void test_random(void) {
  fb_device d = fake_dev(1);
  fb_rec_config cfg = {0};
  fb_recorder *r;
  CHECK_OK(fb_recorder_create(&d, &cfg, &r));
  fb_recorder_stream(r, S_COMPUTE, "compute");
  fb_recorder_stream(r, S_COMM, "comm");
  srand(12345);
  for (int trial = 0; trial < 200; trial++) {
    int iv[24][3], n = 1 + rand() % 24;
    next_ticket = 0;
    fake_now = 0;
    fb_recorder_step_begin(r, trial, 0);
    for (int i = 0; i < n; i++) {
      iv[i][0] = rand() % 2;
      iv[i][1] = rand() % 180;
      iv[i][2] = iv[i][1] + rand() % 20;
      op(r, iv[i][0] ? S_COMM : S_COMPUTE, iv[i][0] ? FB_OP_COLL : FB_OP_GEMM, iv[i][1],
         iv[i][2], 1);
    }
    fb_step_stats s;
    CHECK_OK(fb_recorder_step_end(r, &s));
    double c, m, e;
    brute((const int(*)[3])iv, n, &c, &m, &e);
    CHECK_CLOSE(s.compute, c, 0, 1e-9);
    CHECK_CLOSE(s.comm, m, 0, 1e-9);
    CHECK_CLOSE(s.exposed_comm, e, 0, 1e-9);
    CHECK(s.n_ops == n, "n_ops");
    check_stats_sane(&s);
  }
  int64_t n;
  fb_recorder_ops(r, &n);
  CHECK(n == 0, "tracing off keeps no ops (%lld)", (long long)n);
  fb_recorder_destroy(r);
}

static void mem(fb_recorder *r, fb_mem_stats *ms, int64_t id, fb_mem_cat cat, int64_t delta) {
  fb_buf b = {.bytes = (size_t)(delta > 0 ? delta : -delta), .cat = cat, .id = id,
              .label = "test.buf"};
  ms->cur[cat] += delta;
  ms->cur_total += delta;
  fb_recorder_mem(r, fake_now, &b, delta, ms);
}

static void test_memory(void) {
  fb_device d = fake_dev(0);
  /* Tracing steps >= 1 only; no full timeline: step 0 events dropped, baseline at step 1. */
  fb_rec_config cfg = {.trace = true, .trace_wait = 1, .trace_active = 0};
  fb_recorder *r;
  CHECK_OK(fb_recorder_create(&d, &cfg, &r));
  fb_mem_stats ms = {0};
  mem(r, &ms, 1, FB_MEM_PARAM_SHARD, 1000); /* setup */
  fb_step_stats s;
  for (int step = 0; step < 3; step++) {
    fb_recorder_step_begin(r, step, 0);
    mem(r, &ms, 10 + step, FB_MEM_ACT, 64);
    mem(r, &ms, 10 + step, FB_MEM_ACT, -64);
    CHECK_OK(fb_recorder_step_end(r, &s));
  }
  int64_t n;
  const fb_rec_mem *m = fb_recorder_mems(r, &n);
  /* steps 1 and 2: one baseline (param_shard) + alloc + free each */
  CHECK(n == 6, "kept mem events %lld", (long long)n);
  if (n == 6) {
    CHECK(m[0].delta == 0 && m[0].cat == FB_MEM_PARAM_SHARD && m[0].cat_after == 1000 &&
              m[0].id == -1, "baseline event");
    CHECK(m[1].delta == 64 && m[1].cat_after == 64 && m[1].total_after == 1064, "alloc event");
    CHECK(m[2].delta == -64 && m[2].cat_after == 0 && m[2].total_after == 1000, "free event");
    CHECK(m[5].delta == -64 && m[5].total_after == 1000, "back to the persistent baseline");
  }
  fb_recorder_destroy(r);

  /* Full timeline: everything kept, including setup. */
  cfg = (fb_rec_config){.mem_timeline = true};
  CHECK_OK(fb_recorder_create(&d, &cfg, &r));
  memset(&ms, 0, sizeof ms);
  mem(r, &ms, 1, FB_MEM_PARAM_SHARD, 1000);
  fb_recorder_step_begin(r, 0, 0);
  mem(r, &ms, 2, FB_MEM_TEMP, 8);
  op(r, S_COMPUTE, FB_OP_GEMM, 0, 1, 1); /* "kernel", unit 3 */
  mem(r, &ms, 2, FB_MEM_TEMP, -8);
  CHECK_OK(fb_recorder_step_end(r, &s));
  m = fb_recorder_mems(r, &n);
  CHECK(n == 3, "full timeline keeps all %lld", (long long)n);
  /* who: an alloc is named by the next op issued, a free by the last one; steps as they run */
  if (n == 3) {
    CHECK(m[0].step == -1 && m[1].step == 0 && m[2].step == 0, "steps %d %d %d", m[0].step,
          m[1].step, m[2].step);
    CHECK(m[0].op && !strcmp(m[0].op, "kernel") && m[0].unit == 3, "setup alloc -> next op");
    CHECK(m[1].op && !strcmp(m[1].op, "kernel") && m[1].unit == 3, "alloc -> next op");
    CHECK(m[2].op && !strcmp(m[2].op, "kernel") && m[2].unit == 3, "free -> last op");
  }
  fb_recorder_destroy(r);
  cfg = (fb_rec_config){.mem_timeline = true};
  CHECK_OK(fb_recorder_create(&d, &cfg, &r));
  mem(r, &ms, 3, FB_MEM_TEMP, 8);
  m = fb_recorder_mems(r, &n);
  CHECK(n == 1 && !m[0].op && m[0].unit == -1, "no op issued yet: none named");
  fb_recorder_destroy(r);
}

typedef struct thr_arg {
  fb_recorder *r;
  fb_stream *s;
  uint64_t base;
} thr_arg;

static void *thr(void *p) {
  thr_arg *a = p;
  fb_op_cost c = {.name = "x", .kind = FB_OP_MEM, .flops = 1};
  for (uint64_t i = 0; i < 2000; i++) fb_recorder_op(a->r, a->s, &c, 0, a->base + 2 * i,
                                                     a->base + 2 * i + 1);
  return NULL;
}

static void test_threads(void) {
  fb_device d = fake_dev(0);
  fb_rec_config cfg = {.trace = true};
  fb_recorder *r;
  CHECK_OK(fb_recorder_create(&d, &cfg, &r));
  fb_recorder_stream(r, S_COMPUTE, "compute");
  fb_recorder_stream(r, S_COMM, "comm");
  for (int i = 0; i < 8000; i++) fake_ticket[i] = i;
  fb_recorder_step_begin(r, 0, 0);
  thr_arg a = {r, S_COMPUTE, 0}, b = {r, S_COMM, 4000};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, thr, &a);
  pthread_create(&tb, NULL, thr, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  fb_step_stats s;
  CHECK_OK(fb_recorder_step_end(r, &s));
  CHECK(s.n_ops == 4000, "n_ops %d", s.n_ops);
  CHECK_CLOSE(s.flops, 4000, 0, 0);
  CHECK_CLOSE(s.compute, 2000, 0, 1e-9);
  CHECK_CLOSE(s.comm, 2000, 0, 1e-9);
  CHECK_CLOSE(s.exposed_comm, 2000, 0, 1e-9);
  int64_t n;
  fb_recorder_ops(r, &n);
  CHECK(n == 4000, "kept %lld", (long long)n);
  fb_recorder_destroy(r);
}

int main(void) {
  test_hand_made();
  test_random();
  test_memory();
  test_threads();
  return fb_test_done("test_recorder");
}
