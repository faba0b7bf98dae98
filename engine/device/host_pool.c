/* The host caching allocator (see host_pool.h). Free lists are intrusive: a cached block's
 * first word links to the next cached block of its size; the sizes live in one array sorted
 * by size (a run has tens of distinct large sizes), searched by bisection under one mutex.
 * The most recently freed block is handed out first (its pages are the warmest). It does not
 * split or merge blocks: a request is served only by a block of exactly its rounded size. */
#include "host_pool.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
      free(b);
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
  b = aligned_alloc(64, size);
  if (!b && p->st.cached > 0) { /* memory held for other sizes: give it back and retry */
    release_all(p);
    b = aligned_alloc(64, size);
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
        free(ptr);
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
