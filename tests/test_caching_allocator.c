/* The caching-allocator model (engine/sim/caching_allocator.h): block rounding and segment
 * sizes, small-pool packing and large-pool splitting (with the 1 MiB remainder rule), per-stream
 * pools, record_stream holding a block until its ready time and a later malloc, the retry at
 * capacity (cached unsplit segments freed, cudaMalloc retried) and the OOM after it, and
 * reserved >= active >= allocated through a long random sequence, and the walk of its state
 * (the memory snapshot's segments) tiling the segments. On the sim device: a retry
 * costs the host a device-wide sync plus a cudaFree per released segment and a cudaMalloc. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/device/device.h"
#include "engine/sim/caching_allocator.h"
#include "engine/sim/cost_model.h"
#include "engine/sim/hardware.h"
#include "engine/backends/registry.h"

#define KiB ((int64_t)1024)
#define MiB ((int64_t)1024 * 1024)
#define GiB ((int64_t)1024 * 1024 * 1024)

static fb_cca_stats stats(const fb_cca *a) {
  fb_cca_stats s;
  fb_cca_get_stats(a, &s);
  return s;
}

static void check_sizes(void) {
  CHECK(fb_cca_block_size(1) == 512, "1 B -> %lld", (long long)fb_cca_block_size(1));
  CHECK(fb_cca_block_size(512) == 512, "512 B");
  CHECK(fb_cca_block_size(513) == 1024, "513 B -> %lld", (long long)fb_cca_block_size(513));
  CHECK(fb_cca_block_size(MiB + 1) == MiB + 512, "1 MiB + 1");
  CHECK(fb_cca_segment_size(512) == 2 * MiB, "small block: 2 MiB segment");
  CHECK(fb_cca_segment_size(MiB) == 2 * MiB, "1 MiB is still small");
  CHECK(fb_cca_segment_size(MiB + 512) == 20 * MiB, "just over 1 MiB: 20 MiB segment");
  CHECK(fb_cca_segment_size(10 * MiB - 512) == 20 * MiB, "under 10 MiB: 20 MiB segment");
  CHECK(fb_cca_segment_size(10 * MiB) == 10 * MiB, "10 MiB: its own size");
  CHECK(fb_cca_segment_size(10 * MiB + 512) == 12 * MiB, "rounded up to 2 MiB");
  CHECK(fb_cca_segment_size(GiB + 1) == GiB + 2 * MiB, "1 GiB + 1: next 2 MiB");
}

static void check_small_pool(void) {
  fb_cca *a;
  CHECK_OK(fb_cca_create(GiB, &a));
  fb_cca_malloc_info i1, i2, i3;
  CHECK_OK(fb_cca_malloc(a, 1, 1000, 0, 0, &i1));
  CHECK(i1.segment == 2 * MiB && i1.block == 1024, "first small: a 2 MiB segment, 1 KiB block");
  CHECK_OK(fb_cca_malloc(a, 2, 3000, 0, 0, &i2));
  CHECK(i2.segment == 0 && i2.block == 3072, "second small: split from the same segment");
  fb_cca_stats s = stats(a);
  CHECK(s.reserved == 2 * MiB && s.allocated == 4096 && s.requested == 4000, "counts");
  fb_cca_free(a, 1, -1, 0);
  fb_cca_free(a, 2, -1, 0);
  s = stats(a);
  CHECK(s.allocated == 0 && s.reserved == 2 * MiB && s.segments == 1, "freed: cached");
  /* the two blocks merged back: a 2 MiB-sized small request fits without a new segment */
  CHECK_OK(fb_cca_malloc(a, 3, MiB, 0, 0, &i3));
  CHECK(i3.segment == 0, "merged segment reused");
  fb_cca_destroy(a);
}

static void check_large_split(void) {
  fb_cca *a;
  CHECK_OK(fb_cca_create(GiB, &a));
  fb_cca_malloc_info i;
  CHECK_OK(fb_cca_malloc(a, 1, 5 * MiB, 0, 0, &i));
  CHECK(i.segment == 20 * MiB && i.block == 5 * MiB, "5 MiB in a 20 MiB segment, split");
  CHECK_OK(fb_cca_malloc(a, 2, 8 * MiB, 0, 0, &i));
  CHECK(i.segment == 0 && i.block == 8 * MiB, "8 MiB from the 15 MiB remainder");
  CHECK_OK(fb_cca_malloc(a, 3, 12 * MiB, 0, 0, &i));
  CHECK(i.segment == 12 * MiB, "12 MiB: its own segment (the 7 MiB remainder is too small)");
  fb_cca_free(a, 3, -1, 0);
  /* 11.5 MiB fits the cached 12 MiB block; the 0.5 MiB rest is not split (large pool: only
   * remainders over 1 MiB are) */
  CHECK_OK(fb_cca_malloc(a, 4, 11 * MiB + 512 * KiB, 0, 0, &i));
  CHECK(i.segment == 0 && i.block == 12 * MiB, "whole 12 MiB block handed out: %lld",
        (long long)i.block);
  CHECK(stats(a).allocated == 25 * MiB, "allocated counts block sizes: %lld",
        (long long)stats(a).allocated);
  /* best fit: 6 MiB goes to the 7 MiB remainder of the 20 MiB segment, not a new segment */
  CHECK_OK(fb_cca_malloc(a, 5, 6 * MiB, 0, 0, &i));
  CHECK(i.segment == 0 && i.block == 7 * MiB, "best fit, 1 MiB remainder kept: %lld",
        (long long)i.block);
  fb_cca_destroy(a);
}

static void check_streams(void) {
  fb_cca *a;
  CHECK_OK(fb_cca_create(GiB, &a));
  fb_cca_malloc_info i;
  CHECK_OK(fb_cca_malloc(a, 1, 64 * MiB, 0, 0, &i));
  fb_cca_free(a, 1, -1, 0);
  CHECK_OK(fb_cca_malloc(a, 2, 64 * MiB, 1, 0, &i));
  CHECK(i.segment == 64 * MiB, "a block cached on stream 0 does not serve stream 1");
  CHECK(stats(a).reserved == 128 * MiB && stats(a).allocated == 64 * MiB,
        "reserved 128 MiB for 64 MiB allocated");
  CHECK_OK(fb_cca_malloc(a, 3, 64 * MiB, 0, 0, &i));
  CHECK(i.segment == 0, "stream 0 reuses its own cached block");
  fb_cca_destroy(a);
}

static void check_record_stream(void) {
  fb_cca *a;
  CHECK_OK(fb_cca_create(GiB, &a));
  fb_cca_malloc_info i;
  CHECK_OK(fb_cca_malloc(a, 1, 64 * MiB, 1, 0, &i)); /* all-gather stream */
  fb_cca_free(a, 1, 1, 3.0);                        /* same stream: back at once */
  CHECK(stats(a).held == 0, "a free on the allocating stream is not held");
  CHECK_OK(fb_cca_malloc(a, 2, 64 * MiB, 1, 1.0, &i));
  CHECK(i.segment == 0, "reused at once");
  fb_cca_free(a, 2, 0, 5.0); /* used by the compute stream until t = 5 */
  fb_cca_stats s = stats(a);
  CHECK(s.held == 1 && s.allocated == 0 && s.active == 64 * MiB, "held, active, not allocated");
  CHECK_OK(fb_cca_malloc(a, 3, 64 * MiB, 1, 4.0, &i));
  CHECK(i.segment == 64 * MiB, "at t = 4 the compute stream is not done: a new segment");
  CHECK(stats(a).held == 1, "still held");
  fb_cca_free(a, 3, -1, 0);
  /* the block became ready at 5, but only a malloc at >= 5 releases it (process_events) */
  CHECK(stats(a).held == 1, "no malloc yet: still held");
  CHECK_OK(fb_cca_malloc(a, 4, 32 * MiB, 0, 6.0, &i)); /* any stream's malloc processes events */
  CHECK(stats(a).held == 0 && stats(a).active == 32 * MiB, "released by a later malloc");
  CHECK_OK(fb_cca_malloc(a, 5, 64 * MiB, 1, 6.0, &i));
  CHECK(i.segment == 0, "and then reusable on its stream");
  CHECK(stats(a).reserved == 128 * MiB + 32 * MiB, "reserved %lld", (long long)stats(a).reserved);
  fb_cca_destroy(a);
}

static void check_retry(void) {
  fb_cca *a;
  CHECK_OK(fb_cca_create(100 * MiB, &a));
  fb_cca_malloc_info i;
  CHECK_OK(fb_cca_malloc(a, 1, 40 * MiB, 0, 0, &i));
  fb_cca_free(a, 1, -1, 0); /* cached on stream 0 */
  CHECK_OK(fb_cca_malloc(a, 2, 40 * MiB, 1, 0, &i));
  CHECK(i.segment == 40 * MiB && !i.retried, "fits beside the cache");
  CHECK_OK(fb_cca_malloc(a, 3, 20 * MiB, 1, 0, &i));
  fb_cca_free(a, 3, 0, 9.0); /* held by record_stream: released by the retry's event sync */
  CHECK_OK(fb_cca_malloc(a, 4, 40 * MiB, 1, 0, &i));
  CHECK(i.retried && i.released == 2 && !i.oom && i.segment == 40 * MiB,
        "retry: the cached and the held segments freed (%d), then it fits", i.released);
  fb_cca_stats s = stats(a);
  CHECK(s.num_alloc_retries == 1 && s.num_sync_all_streams == 1 && s.num_device_free == 2 &&
            s.num_ooms == 0 && s.held == 0,
        "retry counters");
  CHECK(s.reserved == 80 * MiB && s.reserved_peak == 100 * MiB, "reserved %lld peak %lld",
        (long long)s.reserved, (long long)s.reserved_peak);
  /* no cache left: the next one does not fit even after a retry */
  CHECK_OK(fb_cca_malloc(a, 5, 40 * MiB, 1, 0, &i));
  CHECK(i.retried && i.oom && i.released == 0, "OOM after the retry");
  CHECK_OK(fb_cca_malloc(a, 6, 40 * MiB, 1, 0, &i));
  CHECK(i.oom && !i.retried, "after the first OOM: counted, no more retries");
  s = stats(a);
  CHECK(s.num_ooms == 2 && s.num_alloc_retries == 2, "ooms %lld retries %lld",
        (long long)s.num_ooms, (long long)s.num_alloc_retries);
  fb_cca_destroy(a);
}

/* fb_cca_walk: blocks in address order tile their segments, the segments sum to reserved, the
 * allocated ones sum to allocated and are exactly the live keys at their fb_cca_addr_of, the
 * held ones count as held. */
typedef struct walk_acc {
  int64_t seg, seg_end, next, reserved, allocated, held, nalloc, last;
  int bad;
  const fb_cca *a;
} walk_acc;

static fb_status walk_one(void *ctx, const fb_cca_block *b) {
  walk_acc *w = ctx;
  if (b->segment != w->seg) { /* a new segment starts at its first block */
    if (w->next != w->seg_end || b->addr != b->segment || b->segment < w->seg_end) w->bad++;
    w->seg = b->segment;
    w->seg_end = b->segment + b->segment_size;
    w->reserved += b->segment_size;
  } else if (b->addr != w->next) {
    w->bad++;
  }
  w->next = b->addr + b->size;
  if (b->addr <= w->last || w->next > w->seg_end || (b->allocated && b->held)) w->bad++;
  w->last = b->addr;
  if (b->allocated) {
    w->allocated += b->size;
    w->nalloc++;
    if (fb_cca_addr_of(w->a, b->key) != b->addr || b->requested <= 0 || b->requested > b->size)
      w->bad++;
  }
  if (b->held) w->held++;
  if (!b->allocated && !b->held && (b->key || b->requested)) w->bad++;
  return FB_OK;
}

static void check_walk(const fb_cca *a, int64_t nlive) {
  walk_acc w = {.seg = -1, .seg_end = -1, .next = -1, .last = -1, .a = a};
  CHECK_OK(fb_cca_walk(a, walk_one, &w));
  fb_cca_stats s = stats(a);
  CHECK(w.bad == 0, "walk: %d blocks out of place", w.bad);
  CHECK(w.next == w.seg_end, "walk: the last segment is tiled");
  CHECK(w.reserved == s.reserved && w.allocated == s.allocated && w.held == s.held,
        "walk: reserved %lld/%lld, allocated %lld/%lld, held %lld/%lld", (long long)w.reserved,
        (long long)s.reserved, (long long)w.allocated, (long long)s.allocated, (long long)w.held,
        (long long)s.held);
  CHECK(w.nalloc == nlive, "walk: %lld allocated blocks, %lld live keys", (long long)w.nalloc,
        (long long)nlive);
  CHECK(fb_cca_addr_of(a, UINT64_MAX) == -1, "addr_of an unknown key");
}

/* A long random sequence over three streams: reserved >= active >= allocated at every step, and
 * everything freed leaves nothing allocated. */
static void check_invariants(void) {
  fb_cca *a;
  CHECK_OK(fb_cca_create(4 * GiB, &a));
  enum { N = 400 };
  uint64_t live[N] = {0};
  uint64_t next_key = 1, rng = 12345;
  double now = 0;
  int bad = 0;
  for (int step = 0; step < 20000; step++) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    const int slot = (int)((rng >> 33) % N);
    now += 1e-4;
    if (live[slot]) {
      const int use = (int)((rng >> 20) % 4) - 1; /* -1 none, or a stream */
      fb_cca_free(a, live[slot], use, now + (double)((rng >> 10) % 100) * 1e-4);
      live[slot] = 0;
    } else {
      const int64_t sizes[] = {700, 64 * KiB, 900 * KiB, 3 * MiB, 11 * MiB, 40 * MiB, 130 * MiB};
      const int64_t bytes = sizes[(rng >> 40) % 7] + (int64_t)((rng >> 13) % 4096);
      fb_cca_malloc_info info;
      if (fb_cca_malloc(a, next_key, bytes, (int)((rng >> 50) % 3), now, &info) != FB_OK) break;
      if (info.block < bytes) bad++;
      live[slot] = next_key++;
    }
    fb_cca_stats s = stats(a);
    if (!(s.reserved >= s.active && s.active >= s.allocated && s.allocated >= s.requested &&
          s.reserved_peak >= s.reserved && s.allocated_peak >= s.allocated))
      bad++;
  }
  CHECK(bad == 0, "%d steps broke reserved >= active >= allocated >= requested", bad);
  int64_t nlive = 0;
  for (int k = 0; k < N; k++) nlive += live[k] != 0;
  check_walk(a, nlive);
  for (int k = 0; k < N; k++)
    if (live[k]) fb_cca_free(a, live[k], -1, 0);
  fb_cca_stats s = stats(a);
  CHECK(s.allocated == 0 && s.requested == 0, "all freed: %lld allocated", (long long)s.allocated);
  CHECK(s.num_device_alloc > 0 && s.reserved > 0, "segments stay cached");
  fb_cca_destroy(a);
}

/* On the sim device: a retry drains every stream and costs cudaFree per released segment plus a
 * cudaMalloc; the host loses its run-ahead, so the next op starts after all that. */
static void check_sim_retry_cost(void) {
  fb_hardware hw;
  if (fb_hardware_load("h100", &hw) != FB_OK) {
    CHECK(0, "load h100: %s", fb_error_msg());
    return;
  }
  hw.mem_capacity = 100 * MiB;
  hw.host_op_s = 0;
  hw.cuda_malloc_s = 1e-3;
  hw.cuda_free_s = 2e-3;
  fb_device *d;
  CHECK_OK(fb_device_open(fb_device_lookup("sim"), 0, 8, 1, 0, &hw, &d));
  fb_stream *comp, *comm;
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMPUTE, &comp));
  CHECK_OK(d->ops->stream_create(d, FB_STREAM_COMM, &comm));
  fb_buf a, b, c;
  CHECK_OK(fb_alloc(d, 40 * MiB, FB_MEM_TEMP, "a", &a)); /* cudaMalloc: host 1 ms */
  fb_free(d, &a, NULL);
  CHECK_OK(fb_alloc_on(d, comm, 40 * MiB, FB_MEM_COMM, "b", &b)); /* host 2 ms */
  /* a long op on the comm stream: the host runs ahead of it */
  fb_op_cost ag = {.name = "all_gather", .kind = FB_OP_COLL, .coll = FB_COLL_ALL_GATHER,
                   .count = INT64_C(1) << 28, .dtype = FB_BF16, .world = 8};
  d->ops->account(d, comm, &ag);
  uint64_t tk = d->ops->mark(d, comm);
  const double t_comm = d->ops->mark_time(d, tk);
  CHECK(t_comm > 0.005, "test setup: the all-gather is long (%g s)", t_comm);
  fb_dev_model m0;
  CHECK(d->ops->model_stats(d, &m0) && m0.alloc_model && m0.host_model, "models on");
  CHECK_OK(fb_alloc_on(d, comm, 40 * MiB, FB_MEM_COMM, "c", &c)); /* 120 > 100 MiB: retry */
  fb_dev_model m1;
  d->ops->model_stats(d, &m1);
  CHECK(m1.alloc_retries == 1 && m1.device_frees == 1 && m1.ooms == 0, "one retry, one free");
  /* next op on the compute stream: after the drain (comm end) + 1 cudaFree + 1 cudaMalloc */
  fb_op_cost tiny = {.name = "memset0", .kind = FB_OP_MEM, .dtype = FB_F32, .bytes = 4};
  uint64_t t0 = d->ops->mark(d, comp);
  d->ops->account(d, comp, &tiny);
  const double start = d->ops->mark_time(d, t0);
  CHECK_CLOSE(start, t_comm + 2e-3 + 1e-3, 1e-9, 1e-12);
  CHECK_CLOSE(m1.retry_s - m0.retry_s, t_comm - 2e-3 + 2e-3 + 1e-3, 1e-9, 1e-12);
  fb_free(d, &b, NULL);
  fb_free(d, &c, NULL);
  d->ops->stream_destroy(d, comm);
  d->ops->stream_destroy(d, comp);
  fb_device_close(d);
}

int main(void) {
  check_sizes();
  check_small_pool();
  check_large_split();
  check_streams();
  check_record_stream();
  check_retry();
  check_invariants();
  check_sim_retry_cost();
  return fb_test_done("test_caching_allocator");
}
