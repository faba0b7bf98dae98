/* A caching allocator for host memory: the cpu device's counterpart of the CUDA memory pool
 * with an unlimited release threshold. Freed blocks of POOL_MIN bytes or more stay mapped and
 * go back on a free list keyed by their exact (64-byte rounded) size; the next request of that
 * size takes one back. A training step allocates the same sizes every step (gathered units,
 * unsharded gradients, activations), so after the first step no large allocation reaches the
 * kernel and no page is faulted in again, as on a GPU's caching allocator.
 * Smaller blocks go straight to malloc (glibc keeps those in its own bins). Thread-safe: the
 * comm stream's worker frees blocks the host allocated. It does not count categories or
 * peaks (device.c does); it only knows bytes reserved from the system. */
#ifndef FB_HOST_POOL_H
#define FB_HOST_POOL_H
#include <stddef.h>
#include <stdint.h>

#define FB_HOST_POOL_MIN ((size_t)64 << 10) /* smaller blocks are not cached */
#define FB_HOST_POOL_HUGE ((size_t)1 << 20) /* larger ones: whole 2 MiB pages, advised huge */

typedef struct fb_host_pool fb_host_pool;

typedef struct fb_host_pool_stats {
  int64_t reserved; /* bytes taken from the system and not returned (live + cached), as the
                     * blocks' sizes: a block of FB_HOST_POOL_HUGE bytes or more maps whole
                     * 2 MiB pages, up to 2 MiB of address space past its size */
  int64_t cached;   /* bytes on the free lists */
  int64_t hits;     /* requests served from a free list */
  int64_t misses;   /* pooled-size requests that went to the system */
} fb_host_pool_stats;

/* NULL when out of host memory. */
fb_host_pool *fb_host_pool_create(void);
/* Frees every cached block; every block handed out must have been returned. */
void fb_host_pool_destroy(fb_host_pool *p);

/* A 64-byte aligned block of at least `bytes` (rounded up to 64). A miss that the system
 * refuses releases every cached block and tries once more. NULL when it still fails. */
void *fb_host_pool_get(fb_host_pool *p, size_t bytes);
/* Returns a block from fb_host_pool_get with the same `bytes`. NULL is ignored. */
void fb_host_pool_put(fb_host_pool *p, void *ptr, size_t bytes);
/* Returns every cached block to the system. */
void fb_host_pool_trim(fb_host_pool *p);
fb_host_pool_stats fb_host_pool_get_stats(fb_host_pool *p);

#endif
