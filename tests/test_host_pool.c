/* The host caching allocator: a freed block of a pooled size comes back for the next request
 * of that size (the same address, no new system memory), sizes are kept apart, small blocks
 * bypass the pool, trim returns the cache, reserved/cached/hit/miss counters are exact, and
 * blocks freed on one thread are reused on another; a block of FB_HOST_POOL_HUGE bytes or more
 * starts at a 2 MiB boundary and its mapping ends at one (/proc/self/maps), so every 2 MiB of
 * it can be a transparent huge page. It does not test the cpu device's
 * accounting (test_device_cpu). */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine/device/host_pool.h"

#define MiB ((size_t)1 << 20)

static void test_reuse(void) {
  fb_host_pool *p = fb_host_pool_create();
  CHECK(p != NULL, "create");
  if (!p) return;
  void *a = fb_host_pool_get(p, 3 * MiB), *b = fb_host_pool_get(p, 3 * MiB);
  CHECK(a && b && a != b, "two live blocks are distinct");
  CHECK(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0, "64-byte aligned");
  memset(a, 1, 3 * MiB);
  memset(b, 2, 3 * MiB);
  fb_host_pool_stats s = fb_host_pool_get_stats(p);
  CHECK(s.reserved == (int64_t)(6 * MiB) && s.cached == 0 && s.hits == 0 && s.misses == 2,
        "reserved %lld cached %lld hits %lld misses %lld", (long long)s.reserved,
        (long long)s.cached, (long long)s.hits, (long long)s.misses);
  fb_host_pool_put(p, a, 3 * MiB);
  s = fb_host_pool_get_stats(p);
  CHECK(s.cached == (int64_t)(3 * MiB) && s.reserved == (int64_t)(6 * MiB), "cached after put");
  /* another size does not take it */
  void *c = fb_host_pool_get(p, 3 * MiB + 64);
  CHECK(c && c != a, "a different size gets a different block");
  /* the same size (after rounding to 64) does: 3 MiB - 10 rounds to 3 MiB */
  void *a2 = fb_host_pool_get(p, 3 * MiB - 10);
  CHECK(a2 == a, "same rounded size reuses the cached block (%p vs %p)", a2, a);
  s = fb_host_pool_get_stats(p);
  CHECK(s.hits == 1 && s.misses == 3 && s.cached == 0, "hits %lld misses %lld cached %lld",
        (long long)s.hits, (long long)s.misses, (long long)s.cached);
  /* last in, first out */
  fb_host_pool_put(p, a2, 3 * MiB);
  fb_host_pool_put(p, b, 3 * MiB);
  CHECK(fb_host_pool_get(p, 3 * MiB) == b, "the most recently freed block comes back first");
  fb_host_pool_put(p, b, 3 * MiB);
  fb_host_pool_put(p, c, 3 * MiB + 64);
  s = fb_host_pool_get_stats(p);
  CHECK(s.cached == s.reserved && s.reserved == (int64_t)(9 * MiB + 64), "all cached %lld/%lld",
        (long long)s.cached, (long long)s.reserved);
  fb_host_pool_trim(p);
  s = fb_host_pool_get_stats(p);
  CHECK(s.cached == 0 && s.reserved == 0, "trim returns everything: %lld %lld",
        (long long)s.cached, (long long)s.reserved);
  fb_host_pool_destroy(p);
}

static void test_small_bypass(void) {
  fb_host_pool *p = fb_host_pool_create();
  if (!p) return;
  void *a = fb_host_pool_get(p, 1000);
  CHECK(a && ((uintptr_t)a % 64) == 0, "small block aligned");
  fb_host_pool_put(p, a, 1000);
  fb_host_pool_stats s = fb_host_pool_get_stats(p);
  CHECK(s.reserved == 0 && s.cached == 0 && s.misses == 0, "small blocks are not pooled");
  void *z = fb_host_pool_get(p, 0);
  CHECK(z != NULL, "a zero-byte request gets a block");
  fb_host_pool_put(p, z, 0);
  fb_host_pool_put(p, NULL, 5 * MiB); /* ignored */
  CHECK(fb_host_pool_get(p, SIZE_MAX - 3) == NULL, "overflowing size refused");
  fb_host_pool_destroy(p);
}

typedef struct handoff {
  fb_host_pool *p;
  void *blk[8];
} handoff;

static void *freer(void *arg) {
  handoff *h = arg;
  for (int i = 0; i < 8; i++) fb_host_pool_put(h->p, h->blk[i], (size_t)(i % 2 + 1) * MiB);
  return NULL;
}

static void test_cross_thread(void) {
  handoff h = {.p = fb_host_pool_create()};
  if (!h.p) return;
  for (int i = 0; i < 8; i++) h.blk[i] = fb_host_pool_get(h.p, (size_t)(i % 2 + 1) * MiB);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, freer, &h) == 0, "thread");
  pthread_join(t, NULL);
  fb_host_pool_stats s = fb_host_pool_get_stats(h.p);
  CHECK(s.cached == (int64_t)(12 * MiB) && s.cached == s.reserved, "cached %lld",
        (long long)s.cached);
  /* all eight come back without new system memory */
  void *again[8];
  for (int i = 0; i < 8; i++) again[i] = fb_host_pool_get(h.p, (size_t)(i % 2 + 1) * MiB);
  s = fb_host_pool_get_stats(h.p);
  CHECK(s.hits == 8 && s.misses == 8 && s.reserved == (int64_t)(12 * MiB),
        "hits %lld misses %lld reserved %lld", (long long)s.hits, (long long)s.misses,
        (long long)s.reserved);
  for (int i = 0; i < 8; i++) fb_host_pool_put(h.p, again[i], (size_t)(i % 2 + 1) * MiB);
  fb_host_pool_destroy(h.p);
}

/* The [start, end) of the mapping that holds address a (/proc/self/maps), or false. */
static bool mapping_of(uintptr_t a, uintptr_t *start, uintptr_t *end) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    uintptr_t lo, hi;
    if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) == 2 && lo <= a && a < hi)
      *start = lo, *end = hi, found = true;
  }
  fclose(f);
  return found;
}

static void test_huge_blocks(void) {
  fb_host_pool *p = fb_host_pool_create();
  CHECK(p != NULL, "create");
  if (!p) return;
  const size_t sizes[] = {FB_HOST_POOL_HUGE, 3 * MiB / 2, 2 * MiB, 3 * MiB + 4096};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    const size_t n = sizes[i];
    char *b = fb_host_pool_get(p, n);
    CHECK(b && (uintptr_t)b % (2 * MiB) == 0, "a %zu-byte block starts at a 2 MiB boundary", n);
    if (!b) continue;
    memset(b, 1, n);
    uintptr_t lo = 0, hi = 0;
    CHECK(mapping_of((uintptr_t)b, &lo, &hi), "the block lies in a mapping");
    /* its mapping may have merged with a neighbour: it must reach a 2 MiB boundary at or
     * after the block's end, so the block's last (partial) 2 MiB can be a huge page */
    const uintptr_t end = (uintptr_t)b + n, last = (end + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1);
    CHECK(lo <= (uintptr_t)b && hi >= last, "a %zu-byte block's mapping [%#" PRIxPTR ", %#" PRIxPTR
          ") covers whole 2 MiB up to %#" PRIxPTR, n, lo, hi, last);
    fb_host_pool_put(p, b, n);
  }
  fb_host_pool_destroy(p);
}

int main(void) {
  test_reuse();
  test_huge_blocks();
  test_small_bypass();
  test_cross_thread();
  return fb_test_done("test_host_pool");
}
