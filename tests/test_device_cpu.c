/* The cpu device and the allocator: per-category accounting and peaks (at_peak snapshot),
 * the mem_limit refusal message, events across streams, real overlap of the comm stream with
 * the calling thread, poisoned streams, timing marks, the registry and collective byte counts.
 * It does not test kernels (test_ops_*) or communicators (test_comm_local). */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "engine/device/device.h"
#include "engine/backends/cpu/device_cpu.h"
#include "engine/backends/registry.h"

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* ---- accounting ---------------------------------------------------------------------------- */

static void test_accounting(void) {
  fb_device *d = NULL;
  CHECK_OK(fb_device_open(&fb_cpu_device_ops, 0, 1, 1, 0, NULL, &d));
  if (!d) return;
  CHECK(!d->simulated, "cpu is not simulated");
  fb_buf p, a, t, z;
  CHECK_OK(fb_alloc(d, 1000, FB_MEM_PARAM_SHARD, "test.param", &p));
  CHECK(p.ptr && ((uintptr_t)p.ptr % 64) == 0, "64-byte aligned: %p", p.ptr);
  CHECK_OK(fb_alloc(d, 3000, FB_MEM_ACT, "test.act", &a));
  CHECK(d->mem.cur_total == 4000 && d->mem.peak_total == 4000, "total %lld peak %lld",
        (long long)d->mem.cur_total, (long long)d->mem.peak_total);
  CHECK(d->mem.at_peak[FB_MEM_PARAM_SHARD] == 1000 && d->mem.at_peak[FB_MEM_ACT] == 3000,
        "at_peak %lld %lld", (long long)d->mem.at_peak[FB_MEM_PARAM_SHARD],
        (long long)d->mem.at_peak[FB_MEM_ACT]);
  fb_free(d, &a, NULL);
  CHECK(a.ptr == NULL && a.bytes == 0, "free empties the buffer");
  fb_free(d, &a, NULL); /* idempotent */
  CHECK(d->mem.cur[FB_MEM_ACT] == 0 && d->mem.peak[FB_MEM_ACT] == 3000, "act cur %lld peak %lld",
        (long long)d->mem.cur[FB_MEM_ACT], (long long)d->mem.peak[FB_MEM_ACT]);
  /* a temp of 2500 brings the total to 3500 < 4000: no new total peak */
  CHECK_OK(fb_alloc(d, 2500, FB_MEM_TEMP, "test.temp", &t));
  CHECK(d->mem.peak_total == 4000 && d->mem.at_peak[FB_MEM_TEMP] == 0,
        "peak_total %lld at_peak temp %lld", (long long)d->mem.peak_total,
        (long long)d->mem.at_peak[FB_MEM_TEMP]);
  /* growing the temp to 4500 in total makes a new peak: the snapshot moves */
  fb_buf t2;
  CHECK_OK(fb_alloc(d, 1000, FB_MEM_TEMP, "test.temp2", &t2));
  CHECK(d->mem.peak_total == 4500, "peak_total %lld", (long long)d->mem.peak_total);
  CHECK(d->mem.at_peak[FB_MEM_TEMP] == 3500 && d->mem.at_peak[FB_MEM_ACT] == 0 &&
            d->mem.at_peak[FB_MEM_PARAM_SHARD] == 1000,
        "at_peak temp %lld act %lld param %lld", (long long)d->mem.at_peak[FB_MEM_TEMP],
        (long long)d->mem.at_peak[FB_MEM_ACT], (long long)d->mem.at_peak[FB_MEM_PARAM_SHARD]);
  CHECK(d->mem.peak[FB_MEM_TEMP] == 3500, "temp peak %lld", (long long)d->mem.peak[FB_MEM_TEMP]);
  CHECK(t.id != t2.id && p.id != t.id, "distinct ids");
  CHECK_OK(fb_alloc(d, 0, FB_MEM_TEMP, "test.zero", &z));
  CHECK(z.ptr == NULL && z.bytes == 0, "zero bytes gives NULL");
  fb_free(d, &z, NULL);
  fb_free(d, &t, NULL);
  fb_free(d, &t2, NULL);
  fb_free(d, &p, NULL);
  CHECK(d->mem.cur_total == 0, "all freed: %lld", (long long)d->mem.cur_total);
  CHECK(d->mem.n_alloc == 4 && d->mem.n_free == 4, "n_alloc %lld n_free %lld",
        (long long)d->mem.n_alloc, (long long)d->mem.n_free);
  fb_device_close(d);
}

static void test_mem_limit(void) {
  fb_device *d = NULL;
  const int64_t MiB = 1 << 20;
  CHECK_OK(fb_device_open(&fb_cpu_device_ops, 3, 4, 1, MiB, NULL, &d));
  if (!d) return;
  fb_buf a, b;
  CHECK_OK(fb_alloc(d, (size_t)(MiB * 3 / 4), FB_MEM_PARAM_FULL, "fsdp.gather", &a));
  fb_status st = fb_alloc(d, (size_t)(MiB / 2), FB_MEM_ACT, "block.attn", &b);
  CHECK(st == FB_ENOMEM, "over the limit: %s", fb_status_name(st));
  const char *m = fb_error_msg();
  CHECK(strstr(m, "act") && strstr(m, "block.attn") && strstr(m, "0.50 MiB") &&
            strstr(m, "0.75 MiB") && strstr(m, "1.00 MiB") && strstr(m, "rank 3"),
        "message names category, label, request, use and limit: %s", m);
  CHECK(!strchr(m, '\n'), "one line");
  CHECK(b.ptr == NULL && d->mem.cur_total == MiB * 3 / 4 && d->mem.n_alloc == 1,
        "refusal changes nothing");
  CHECK_OK(fb_alloc(d, (size_t)(MiB / 4), FB_MEM_ACT, "fits exactly", &b));
  fb_free(d, &b, NULL);
  fb_free(d, &a, NULL);
  fb_device_close(d);
  CHECK(fb_device_open(&fb_cpu_device_ops, 4, 4, 1, 0, NULL, &d) == FB_EUSAGE, "rank >= world");
  CHECK(fb_device_open(&fb_cpu_device_ops, 0, 1, 0, 0, NULL, &d) == FB_EUSAGE, "threads 0");
}

/* ---- streams and events --------------------------------------------------------------------- */

typedef struct flag_arg {
  atomic_int v;
  int sleep_ms;
  int seen; /* value of another flag observed by the task */
  atomic_int *watch;
} flag_arg;

static fb_status set_flag(void *p) {
  flag_arg *f = p;
  if (f->sleep_ms) sleep_ms(f->sleep_ms);
  if (f->watch) f->seen = atomic_load(f->watch);
  atomic_store(&f->v, 1);
  return FB_OK;
}

static fb_status fail_io(void *p) {
  (void)p;
  return FB_ERR(FB_EIO, "boom %d", 42);
}

static void test_events(void) {
  fb_device *d = NULL;
  CHECK_OK(fb_device_open(&fb_cpu_device_ops, 0, 1, 1, 0, NULL, &d));
  if (!d) return;
  fb_stream *comp = NULL, *a = NULL, *b = NULL;
  fb_event *e = NULL;
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMPUTE, &comp));
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMM, &a));
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMM, &b));
  CHECK_OK(d->ops->event_create(d, &e));

  /* an event never recorded is complete */
  CHECK_OK(fb_event_sync(d, e));

  /* comm stream A sets a flag after 100 ms; the compute stream waits for it through an event */
  flag_arg fa = {.sleep_ms = 100};
  CHECK_OK(d->ops->host_task(d, a, set_flag, &fa));
  CHECK_OK(fb_event_record(d, e, a));
  CHECK(atomic_load(&fa.v) == 0, "issued ahead, not run yet");
  CHECK_OK(fb_stream_wait(d, comp, e));
  CHECK(atomic_load(&fa.v) == 1, "inline wait blocked until the event completed");

  /* worker -> worker: B waits for A's event, then observes A's flag */
  flag_arg fa2 = {.sleep_ms = 100}, fb2 = {.watch = &fa2.v};
  CHECK_OK(d->ops->host_task(d, a, set_flag, &fa2));
  CHECK_OK(fb_event_record(d, e, a));
  CHECK_OK(fb_stream_wait(d, b, e));
  CHECK_OK(d->ops->host_task(d, b, set_flag, &fb2));
  CHECK_OK(fb_stream_sync(d, b));
  CHECK(fb2.seen == 1, "B ran after A's event: saw %d", fb2.seen);
  CHECK_OK(fb_stream_sync(d, a));

  /* copies on a worker: h2d/d2h return with the data in place; memset0/d2d are ordered */
  fb_buf buf, buf2;
  CHECK_OK(fb_alloc(d, 256, FB_MEM_COMM, "test.buf", &buf));
  CHECK_OK(fb_alloc(d, 256, FB_MEM_COMM, "test.buf2", &buf2));
  unsigned char host[256], back[256];
  for (int i = 0; i < 256; i++) host[i] = (unsigned char)i;
  CHECK_OK(fb_copy_h2d(d, a, buf.ptr, host, 256));
  CHECK_OK(fb_copy_d2d(d, a, buf2.ptr, buf.ptr, 256));
  CHECK_OK(fb_memset0(d, a, buf.ptr, 128));
  CHECK_OK(fb_copy_d2h(d, a, back, buf.ptr, 256));
  CHECK(back[0] == 0 && back[127] == 0 && back[128] == 128 && back[255] == 255, "memset0 ordered");
  CHECK_OK(fb_copy_d2h(d, comp, back, buf2.ptr, 256));
  CHECK(back[0] == 0 && back[200] == 200, "d2d ordered");
  /* deferred free: counted now, released by the worker after the sleeping task */
  flag_arg slow = {.sleep_ms = 50};
  CHECK_OK(d->ops->host_task(d, a, set_flag, &slow));
  fb_free(d, &buf, a);
  CHECK(d->mem.cur[FB_MEM_COMM] == 256, "uncounted at the call: %lld",
        (long long)d->mem.cur[FB_MEM_COMM]);
  fb_free(d, &buf2, NULL);
  CHECK_OK(fb_stream_sync(d, a));

  d->ops->event_destroy(d, e);
  d->ops->stream_destroy(d, b);
  d->ops->stream_destroy(d, a);
  d->ops->stream_destroy(d, comp);
  fb_device_close(d);
}

static void test_overlap(void) {
  fb_device *d = NULL;
  CHECK_OK(fb_device_open(&fb_cpu_device_ops, 0, 1, 1, 0, NULL, &d));
  if (!d) return;
  fb_stream *comm = NULL;
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMM, &comm));
  flag_arg f = {.sleep_ms = 300};
  double t0 = wall();
  CHECK_OK(d->ops->host_task(d, comm, set_flag, &f));
  while (wall() - t0 < 0.3) { /* "compute" on the calling thread */
  }
  CHECK_OK(fb_stream_sync(d, comm));
  double dt = wall() - t0;
  CHECK(atomic_load(&f.v) == 1, "task ran");
  CHECK(dt >= 0.3 && dt < 0.48, "300 ms comm + 300 ms compute overlapped: %.3f s", dt);
  d->ops->stream_destroy(d, comm);
  fb_device_close(d);
}

static void test_poison(void) {
  fb_device *d = NULL;
  CHECK_OK(fb_device_open(&fb_cpu_device_ops, 0, 1, 1, 0, NULL, &d));
  if (!d) return;
  fb_stream *comp = NULL, *comm = NULL;
  fb_event *e = NULL;
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMPUTE, &comp));
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMM, &comm));
  CHECK_OK(d->ops->event_create(d, &e));
  flag_arg later = {0};
  CHECK_OK(d->ops->host_task(d, comm, fail_io, NULL)); /* enqueued: fails later */
  CHECK_OK(d->ops->host_task(d, comm, set_flag, &later));
  CHECK_OK(fb_event_record(d, e, comm));
  fb_error_set(FB_OK, "x", 0, "%s", "unrelated");
  fb_status st = fb_stream_sync(d, comm);
  CHECK(st == FB_EIO && strstr(fb_error_msg(), "boom 42"), "sync returns the task's failure: %s %s",
        fb_status_name(st), fb_error_msg());
  CHECK(atomic_load(&later.v) == 0, "work after the failure is skipped");
  st = fb_stream_sync(d, comm);
  CHECK(st == FB_EIO, "sticky: %s", fb_status_name(st));
  fb_error_set(FB_OK, "x", 0, "%s", "unrelated");
  st = fb_event_sync(d, e);
  CHECK(st == FB_EIO && strstr(fb_error_msg(), "boom 42"), "event carries it: %s %s",
        fb_status_name(st), fb_error_msg());
  st = fb_stream_wait(d, comp, e);
  CHECK(st == FB_EIO, "compute waiting on it fails: %s", fb_status_name(st));
  st = fb_stream_sync(d, comp);
  CHECK(st == FB_EIO && strstr(fb_error_msg(), "boom 42"), "and stays failed: %s %s",
        fb_status_name(st), fb_error_msg());
  /* inline: the failing task's status comes back at once */
  fb_stream *c2 = NULL;
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMPUTE, &c2));
  st = d->ops->host_task(d, c2, fail_io, NULL);
  CHECK(st == FB_EIO, "inline host task failure: %s", fb_status_name(st));
  flag_arg after = {0};
  st = d->ops->host_task(d, c2, set_flag, &after);
  CHECK(st == FB_EIO && atomic_load(&after.v) == 0, "inline poisoned: %s", fb_status_name(st));
  d->ops->stream_destroy(d, c2);
  d->ops->event_destroy(d, e);
  d->ops->stream_destroy(d, comm);
  d->ops->stream_destroy(d, comp);
  fb_device_close(d);
}

static void test_marks(void) {
  fb_device *d = NULL, *d2 = NULL;
  CHECK_OK(fb_device_open(&fb_cpu_device_ops, 0, 2, 1, 0, NULL, &d));
  CHECK_OK(fb_device_open(&fb_cpu_device_ops, 1, 2, 1, 0, NULL, &d2));
  if (!d || !d2) return;
  fb_stream *comp = NULL, *comm = NULL;
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMPUTE, &comp));
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMM, &comm));
  double n0 = fb_now(d), n1 = fb_now(d2);
  CHECK(n0 >= 0 && fabs(n1 - n0) < 0.01, "one epoch for all ranks: %.6f vs %.6f", n0, n1);
  uint64_t m0 = d->ops->mark(d, comp);
  uint64_t m1 = d->ops->mark(d, comm);
  flag_arg f = {.sleep_ms = 60};
  CHECK_OK(d->ops->host_task(d, comm, set_flag, &f));
  uint64_t m2 = d->ops->mark(d, comm);
  uint64_t m3 = d->ops->mark(d, comp); /* stamped now, before the comm stream gets there */
  CHECK_OK(fb_stream_sync(d, comm));
  uint64_t m4 = d->ops->mark(d, comp);
  double t0 = d->ops->mark_time(d, m0), t1 = d->ops->mark_time(d, m1);
  double t2 = d->ops->mark_time(d, m2), t3 = d->ops->mark_time(d, m3);
  double t4 = d->ops->mark_time(d, m4);
  CHECK(m0 && m1 && m2 && m3 && m4, "tickets are non-zero");
  CHECK(t0 <= t1 && t0 <= t3, "stamped after issue: %.6f %.6f %.6f", t0, t1, t3);
  CHECK(t2 - t1 >= 0.055, "comm marks span the 60 ms task: %.6f", t2 - t1);
  CHECK(t3 < t2 && t2 <= t4, "compute mark stamped before the comm stream reached its mark");
  CHECK(isnan(d->ops->mark_time(d, 0)), "ticket 0 is no time");
  /* many marks cross chunk boundaries */
  uint64_t tk[10000];
  for (int i = 0; i < 10000; i++) tk[i] = d->ops->mark(d, i % 2 ? comm : comp);
  CHECK_OK(fb_stream_sync(d, comm));
  int bad = 0;
  for (int i = 0; i < 10000; i++) bad += !(d->ops->mark_time(d, tk[i]) >= t4);
  CHECK(bad == 0, "%d marks unresolved", bad);
  d->ops->marks_reset(d);
  CHECK(isnan(d->ops->mark_time(d, m4)), "reset forgets tickets");
  uint64_t m5 = d->ops->mark(d, comp);
  CHECK(m5 == 1 && d->ops->mark_time(d, m5) >= t4, "fresh tickets after reset");
  d->ops->stream_destroy(d, comm);
  d->ops->stream_destroy(d, comp);
  fb_device_close(d);
  fb_device_close(d2);
}

/* ---- registry and byte counts --------------------------------------------------------------- */

static void test_registry(void) {
  CHECK(fb_device_lookup("cpu") == &fb_cpu_device_ops, "cpu");
  CHECK(fb_device_lookup("sim") != NULL && !strcmp(fb_device_lookup("sim")->name, "sim"), "sim");
  CHECK(fb_device_lookup("tpu") == NULL && fb_device_lookup(NULL) == NULL, "unknown");
  char why[256] = "";
  CHECK(fb_device_available("cpu", why, sizeof why), "cpu available");
  CHECK(fb_device_available("sim", why, sizeof why), "sim available");
  CHECK(!fb_device_available("tpu", why, sizeof why) && strstr(why, "tpu"), "why: %s", why);
#ifndef FB_HAVE_CUDA
  CHECK(fb_device_lookup("cuda") == NULL, "no cuda in this build");
  CHECK(!fb_device_available("cuda", why, sizeof why) && strstr(why, "no CUDA"), "why: %s", why);
#endif
  CHECK(!strcmp(fb_coll_name(FB_COLL_REDUCE_SCATTER), "reduce_scatter"), "name");
  CHECK(!strcmp(fb_coll_name(FB_COLL_BARRIER), "barrier"), "name");
  /* logical bytes */
  CHECK(fb_coll_bytes(FB_COLL_ALL_GATHER, 10, FB_F32, 4) == 160, "ag");
  CHECK(fb_coll_bytes(FB_COLL_REDUCE_SCATTER, 10, FB_BF16, 4) == 80, "rs");
  CHECK(fb_coll_bytes(FB_COLL_ALL_REDUCE, 10, FB_F32, 4) == 80, "ar");
  CHECK(fb_coll_bytes(FB_COLL_BROADCAST, 10, FB_F64, 4) == 80, "bc");
  CHECK(fb_coll_bytes(FB_COLL_BARRIER, 10, FB_F64, 4) == 0, "barrier");
  /* wire bytes per rank on a ring */
  CHECK(fb_coll_wire_bytes(FB_COLL_ALL_GATHER, 10, FB_F32, 4) == 120, "ag wire");
  CHECK(fb_coll_wire_bytes(FB_COLL_REDUCE_SCATTER, 10, FB_F32, 4) == 120, "rs wire");
  CHECK(fb_coll_wire_bytes(FB_COLL_ALL_REDUCE, 100, FB_F32, 4) == 600, "ar wire");
  CHECK(fb_coll_wire_bytes(FB_COLL_BROADCAST, 100, FB_F32, 4) == 300, "bc wire");
  CHECK(fb_coll_wire_bytes(FB_COLL_ALL_REDUCE, 100, FB_F32, 1) == 0, "world 1");
  CHECK(fb_coll_wire_bytes(FB_COLL_BARRIER, 100, FB_F32, 8) == 0, "barrier wire");
  /* the intra-/inter-node split: (nodes - 1) of the world - 1 hops cross nodes */
  double ia, ie;
  fb_coll_wire_split(FB_COLL_ALL_GATHER, 10, FB_F32, 4, 1, &ia, &ie);
  CHECK(ia == 120 && ie == 0, "one node: all intra (%g, %g)", ia, ie);
  fb_coll_wire_split(FB_COLL_ALL_REDUCE, 100, FB_F32, 4, 4, &ia, &ie);
  CHECK(ia == 0 && ie == 600, "a node each: all inter (%g, %g)", ia, ie);
  fb_coll_wire_split(FB_COLL_REDUCE_SCATTER, 8, FB_F32, 64, 8, &ia, &ie);
  CHECK(fabs(ie - 7.0 / 64 * 8 * 4 * 64) < 1e-9 && fabs(ia + ie - 63.0 * 8 * 4) < 1e-9,
        "64 ranks on 8 nodes: inter (nodes-1)/W of the buffer (%g, %g)", ia, ie);
  fb_coll_wire_split(FB_COLL_BROADCAST, 100, FB_F32, 1, 1, &ia, &ie);
  CHECK(ia == 0 && ie == 0, "world 1 sends nothing");
}

int main(void) {
  test_accounting();
  test_mem_limit();
  test_events();
  test_overlap();
  test_poison();
  test_marks();
  test_registry();
  return fb_test_done("test_device_cpu");
}
