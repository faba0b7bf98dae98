/* The host caching allocator (see host_pool.h). Free lists are intrusive: a cached block's
 * first word links to the next cached block of its size; the sizes live in one array sorted
 * by size (a run has tens of distinct large sizes), searched by bisection under one mutex.
 * The most recently freed block is handed out first (its pages are the warmest). It does not
 * split or merge blocks: a request is served only by a block of exactly its rounded size.
 * Blocks of FB_HOST_POOL_HUGE bytes or more are their own mappings, aligned to 2 MiB, rounded
 * up to whole 2 MiB and advised MADV_HUGEPAGE, so that first touch faults them in 2 MiB at a
 * time where the kernel has transparent huge pages (512x fewer page faults; a kernel without
 * them ignores the advice). A huge page needs a whole aligned 2 MiB inside the mapping: the
 * part of a block past its last 2 MiB boundary, and every block under 2 MiB, got 4 KiB pages
 * when the mapping ended with the block (a debug-model run: 20,000 faults, 15 ms of its set-up
 * on 2 cores; now 5,000). The price is address space, and memory once touched: at most 2 MiB
 * per block, under 2x for blocks of 1-2 MiB, nothing for a model whose units are large.
 * The size alone says how a block was obtained and is given back. */
#define _GNU_SOURCE
#include "host_pool.h"

#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_ALIGN ((size_t)2 << 20)

typedef struct free_list {
  size_t size;
  void *head;
} free_list;

struct fb_host_pool {
  pthread_mutex_t mu;
  free_list *lists; /* sorted by size, unique sizes */
  size_t n, cap;
  fb_host_pool_stats st;
};

static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* Bytes mapped for a huge block of `size` bytes: whole 2 MiB (0 on overflow). */
static size_t huge_len(size_t size) { return (size + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1); }

/* A mapping of huge_len(size) bytes at a 2 MiB boundary (over-map, trim both ends), advised
 * huge. */
static void *map_huge(size_t size) {
  const size_t mapped = huge_len(size), len = mapped + HUGE_ALIGN;
  if (mapped < size || len < mapped) return NULL;
  char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return NULL;
  char *p = (char *)(((uintptr_t)base + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
  if (p > base) munmap(base, (size_t)(p - base));
  if (base + len > p + mapped) munmap(p + mapped, (size_t)(base + len - (p + mapped)));
  (void)madvise(p, mapped, MADV_HUGEPAGE); /* advice only: no THP means 4 KiB pages */
  return p;
}

/* A block from the system, by size class (see the top of the file). */
static void *sys_get(size_t size) {
  return size >= FB_HOST_POOL_HUGE ? map_huge(size) : aligned_alloc(64, size);
}

static void sys_put(void *b, size_t size) {
  if (size >= FB_HOST_POOL_HUGE) munmap(b, huge_len(size));
  else free(b);
}

fb_host_pool *fb_host_pool_create(void) {
  fb_host_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p);
    return NULL;
  }
  return p;
}

/* Index of the first list whose size is >= size (n when none). Called with p->mu held. */
static size_t lower_bound(const fb_host_pool *p, size_t size) {
  size_t lo = 0, hi = p->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (p->lists[mid].size < size) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Frees the cached blocks of every list. Called with p->mu held. */
static void release_all(fb_host_pool *p) {
  for (size_t i = 0; i < p->n; i++) {
    for (void *b = p->lists[i].head, *nx; b; b = nx) {
      memcpy(&nx, b, sizeof nx);
      sys_put(b, p->lists[i].size);
      p->st.reserved -= (int64_t)p->lists[i].size;
      p->st.cached -= (int64_t)p->lists[i].size;
    }
    p->lists[i].head = NULL;
  }
  assert(p->st.cached == 0);
}

void fb_host_pool_destroy(fb_host_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  release_all(p);
  assert(p->st.reserved == 0 && "every block must be returned before the pool is destroyed");
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_destroy(&p->mu);
  free(p->lists);
  free(p);
}

void *fb_host_pool_get(fb_host_pool *p, size_t bytes) {
  size_t size = round64(bytes);
  if (size < bytes) return NULL; /* overflow */
  if (size == 0) size = 64;
  if (size < FB_HOST_POOL_MIN) return aligned_alloc(64, size);
  pthread_mutex_lock(&p->mu);
  size_t i = lower_bound(p, size);
  void *b = NULL;
  if (i < p->n && p->lists[i].size == size && p->lists[i].head) {
    b = p->lists[i].head;
    memcpy(&p->lists[i].head, b, sizeof b);
    p->st.cached -= (int64_t)size;
    p->st.hits++;
    pthread_mutex_unlock(&p->mu);
    return b;
  }
  p->st.misses++;
  b = sys_get(size);
  if (!b && p->st.cached > 0) { /* memory held for other sizes: give it back and retry */
    release_all(p);
    b = sys_get(size);
  }
  if (b) p->st.reserved += (int64_t)size;
  pthread_mutex_unlock(&p->mu);
  return b;
}

void fb_host_pool_put(fb_host_pool *p, void *ptr, size_t bytes) {
  if (!ptr) return;
  size_t size = round64(bytes);
  if (size == 0) size = 64;
  if (size < FB_HOST_POOL_MIN) {
    free(ptr);
    return;
  }
  pthread_mutex_lock(&p->mu);
  size_t i = lower_bound(p, size);
  if (i == p->n || p->lists[i].size != size) { /* a new size: insert its (empty) list */
    if (p->n == p->cap) {
      size_t cap = p->cap ? 2 * p->cap : 32;
      free_list *l = realloc(p->lists, cap * sizeof *l);
      if (!l) { /* cannot remember the size: hand the block back to the system */
        p->st.reserved -= (int64_t)size;
        pthread_mutex_unlock(&p->mu);
        sys_put(ptr, size);
        return;
      }
      p->lists = l;
      p->cap = cap;
    }
    memmove(p->lists + i + 1, p->lists + i, (p->n - i) * sizeof *p->lists);
    p->lists[i] = (free_list){.size = size, .head = NULL};
    p->n++;
  }
  memcpy(ptr, &p->lists[i].head, sizeof ptr);
  p->lists[i].head = ptr;
  p->st.cached += (int64_t)size;
  assert(p->st.cached <= p->st.reserved);
  pthread_mutex_unlock(&p->mu);
}

void fb_host_pool_trim(fb_host_pool *p) {
  pthread_mutex_lock(&p->mu);
  release_all(p);
  pthread_mutex_unlock(&p->mu);
}

fb_host_pool_stats fb_host_pool_get_stats(fb_host_pool *p) {
  pthread_mutex_lock(&p->mu);
  fb_host_pool_stats s = p->st;
  pthread_mutex_unlock(&p->mu);
  return s;
}
