/* The caching-allocator model (caching_allocator.h): segments split into blocks, free blocks
 * kept per (stream, small/large pool) in arrays sorted by (size, address), blocks freed under
 * record_stream held in a list until their ready time, and a key -> block hash map.
 * Every array that a free may grow is reserved by the malloc that creates the block, so a
 * free never allocates host memory (and cannot fail). */
#include "caching_allocator.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "../core/grow.h"

typedef struct blk {
  int64_t addr, size, requested;
  int stream;
  bool small, allocated, held;
  double ready;           /* held: when the other stream is done with it */
  uint64_t key;
  struct blk *prev, *next; /* neighbours inside the segment */
} blk;

typedef struct pool {
  blk **v;
  int64_t n, cap;
  int64_t blocks;         /* blocks of this (stream, pool) in any state: bounds n */
  int64_t reserved;       /* bytes of this (stream, pool)'s segments */
} pool;

struct fb_cca {
  int64_t capacity;
  int64_t next_addr;
  pool *pools;            /* [2 * nstreams]: index 2 * stream + small */
  int nstreams;
  blk **held;
  int64_t nheld, capheld, nlive; /* nlive: allocated + held blocks (bounds nheld) */
  uint64_t *keys;         /* open addressing, 0 = empty */
  blk **vals;
  int64_t mcap, mn;
  fb_cca_stats st;
};

/* ---- sizes -------------------------------------------------------------------------------- */

int64_t fb_cca_block_size(int64_t bytes) {
  if (bytes < FB_CCA_MIN_BLOCK) return FB_CCA_MIN_BLOCK;
  return (bytes + FB_CCA_MIN_BLOCK - 1) / FB_CCA_MIN_BLOCK * FB_CCA_MIN_BLOCK;
}

int64_t fb_cca_segment_size(int64_t size) {
  if (size <= FB_CCA_SMALL_SIZE) return FB_CCA_SMALL_BUFFER;
  if (size < FB_CCA_MIN_LARGE_ALLOC) return FB_CCA_LARGE_BUFFER;
  return (size + FB_CCA_ROUND_LARGE - 1) / FB_CCA_ROUND_LARGE * FB_CCA_ROUND_LARGE;
}

/* ---- growable arrays ---------------------------------------------------------------------- */

static bool reserve(void **v, int64_t *cap, int64_t need, size_t elt) {
  return fb_grow(v, cap, need, elt, 16);
}

/* ---- key -> block map ---------------------------------------------------------------------- */

static int64_t slot_of(const fb_cca *a, uint64_t key) {
  uint64_t h = key * UINT64_C(0x9E3779B97F4A7C15);
  return (int64_t)(h >> 17) & (a->mcap - 1);
}

static bool map_grow(fb_cca *a) {
  if ((a->mn + 1) * 2 <= a->mcap) return true;
  int64_t ncap = a->mcap ? 2 * a->mcap : 256;
  uint64_t *k = calloc((size_t)ncap, sizeof *k);
  blk **v = calloc((size_t)ncap, sizeof *v);
  if (!k || !v) {
    free(k);
    free(v);
    return false;
  }
  uint64_t *ok = a->keys;
  blk **ov = a->vals;
  int64_t ocap = a->mcap;
  a->keys = k;
  a->vals = v;
  a->mcap = ncap;
  for (int64_t i = 0; i < ocap; i++) {
    if (!ok[i]) continue;
    int64_t j = slot_of(a, ok[i]);
    while (a->keys[j]) j = (j + 1) & (ncap - 1);
    a->keys[j] = ok[i];
    a->vals[j] = ov[i];
  }
  free(ok);
  free(ov);
  return true;
}

static int64_t map_find(const fb_cca *a, uint64_t key) {
  if (!a->mcap) return -1;
  for (int64_t j = slot_of(a, key);; j = (j + 1) & (a->mcap - 1)) {
    if (!a->keys[j]) return -1;
    if (a->keys[j] == key) return j;
  }
}

static void map_put(fb_cca *a, uint64_t key, blk *b) { /* map_grow ran */
  int64_t j = slot_of(a, key);
  while (a->keys[j]) j = (j + 1) & (a->mcap - 1);
  a->keys[j] = key;
  a->vals[j] = b;
  a->mn++;
}

static blk *map_take(fb_cca *a, uint64_t key) {
  int64_t j = map_find(a, key);
  if (j < 0) return NULL;
  blk *b = a->vals[j];
  const int64_t m = a->mcap - 1;
  /* backward-shift deletion keeps every probe chain unbroken */
  for (int64_t i = j, k = (j + 1) & m;; k = (k + 1) & m) {
    if (!a->keys[k]) {
      a->keys[i] = 0;
      a->vals[i] = NULL;
      break;
    }
    int64_t home = slot_of(a, a->keys[k]);
    /* move k into the hole at i when its home is not cyclically within (i, k] */
    bool stay = (i <= k) ? (home > i && home <= k) : (home > i || home <= k);
    if (!stay) {
      a->keys[i] = a->keys[k];
      a->vals[i] = a->vals[k];
      i = k;
    }
  }
  a->mn--;
  return b;
}

/* ---- pools ------------------------------------------------------------------------------------ */

static pool *pool_of(fb_cca *a, int stream, bool small) {
  return &a->pools[2 * stream + (small ? 1 : 0)];
}

static bool before(const blk *x, int64_t size, int64_t addr) {
  return x->size < size || (x->size == size && x->addr < addr);
}

/* First index whose block is not before (size, addr). */
static int64_t lower(const pool *p, int64_t size, int64_t addr) {
  int64_t lo = 0, hi = p->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (before(p->v[mid], size, addr)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void pool_insert(pool *p, blk *b) {
  assert(p->n < p->cap);
  int64_t i = lower(p, b->size, b->addr);
  memmove(p->v + i + 1, p->v + i, (size_t)(p->n - i) * sizeof *p->v);
  p->v[i] = b;
  p->n++;
}

static void pool_remove(pool *p, blk *b) {
  int64_t i = lower(p, b->size, b->addr);
  assert(i < p->n && p->v[i] == b);
  memmove(p->v + i, p->v + i + 1, (size_t)(p->n - i - 1) * sizeof *p->v);
  p->n--;
}

/* Makes room for streams up to `stream`, one more block of (stream, small) and one more live
 * allocation. */
static bool reserve_block(fb_cca *a, int stream, bool small) {
  if (stream >= a->nstreams) {
    int ns = a->nstreams ? a->nstreams : 2;
    while (ns <= stream) ns *= 2;
    pool *np = realloc(a->pools, (size_t)(2 * ns) * sizeof *np);
    if (!np) return false;
    memset(np + 2 * a->nstreams, 0, (size_t)(2 * (ns - a->nstreams)) * sizeof *np);
    a->pools = np;
    a->nstreams = ns;
  }
  pool *p = pool_of(a, stream, small);
  return reserve((void **)&p->v, &p->cap, p->blocks + 1, sizeof *p->v) &&
         reserve((void **)&a->held, &a->capheld, a->nlive + 1, sizeof *a->held) && map_grow(a);
}

static blk *new_block(fb_cca *a, int64_t addr, int64_t size, int stream, bool small) {
  blk *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->addr = addr;
  b->size = size;
  b->stream = stream;
  b->small = small;
  pool_of(a, stream, small)->blocks++;
  return b;
}

static void drop_block(fb_cca *a, blk *b) {
  pool_of(a, b->stream, b->small)->blocks--;
  free(b);
}

/* Returns a free block to its pool, merged with free neighbours (free_block). */
static void free_block(fb_cca *a, blk *b) {
  pool *p = pool_of(a, b->stream, b->small);
  a->st.active -= b->size;
  blk *nb[2] = {b->prev, b->next};
  for (int i = 0; i < 2; i++) {
    blk *o = nb[i];
    if (!o || o->allocated || o->held) continue;
    pool_remove(p, o);
    if (o == b->prev) {
      b->addr = o->addr;
      b->prev = o->prev;
      if (b->prev) b->prev->next = b;
    } else {
      b->next = o->next;
      if (b->next) b->next->prev = b;
    }
    b->size += o->size;
    drop_block(a, o);
  }
  pool_insert(p, b);
}

/* process_events: held blocks whose other stream is done by `now` go back to their pools. */
static void process_events(fb_cca *a, double now, bool all) {
  int64_t k = 0;
  for (int64_t i = 0; i < a->nheld; i++) {
    blk *b = a->held[i];
    if (all || b->ready <= now) {
      b->held = false;
      a->nlive--;
      a->st.held--;
      free_block(a, b);
    } else {
      a->held[k++] = b;
    }
  }
  a->nheld = k;
}

/* release_cached_blocks: sync every held block, then cudaFree every unsplit cached segment. */
static int release_cached(fb_cca *a) {
  process_events(a, 0, true);
  int released = 0;
  for (int i = 0; i < 2 * a->nstreams; i++) {
    pool *p = &a->pools[i];
    int64_t k = 0;
    for (int64_t j = 0; j < p->n; j++) {
      blk *b = p->v[j];
      if (!b->prev && !b->next) {
        a->st.reserved -= b->size;
        p->reserved -= b->size;
        a->st.segments--;
        a->st.num_device_free++;
        released++;
        drop_block(a, b);
      } else {
        p->v[k++] = b;
      }
    }
    p->n = k;
  }
  return released;
}

/* ---- API ---------------------------------------------------------------------------------- */

fb_status fb_cca_create(int64_t capacity, fb_cca **out) {
  *out = NULL;
  if (capacity <= 0)
    return FB_ERR(FB_EUSAGE, "caching allocator: capacity %lld must be > 0", (long long)capacity);
  fb_cca *a = calloc(1, sizeof *a);
  if (!a) return FB_ERR(FB_ENOMEM, "caching allocator: out of host memory");
  a->capacity = capacity;
  a->next_addr = (int64_t)1 << 32;
  *out = a;
  return FB_OK;
}

void fb_cca_destroy(fb_cca *a) {
  if (!a) return;
  for (int i = 0; i < 2 * a->nstreams; i++) {
    for (int64_t j = 0; j < a->pools[i].n; j++) free(a->pools[i].v[j]);
    free(a->pools[i].v);
  }
  for (int64_t i = 0; i < a->nheld; i++) free(a->held[i]);
  for (int64_t i = 0; i < a->mcap; i++)
    if (a->keys[i]) free(a->vals[i]);
  free(a->pools);
  free(a->held);
  free(a->keys);
  free(a->vals);
  free(a);
}

static bool should_split(const blk *b, int64_t size) {
  int64_t rem = b->size - size;
  return b->small ? rem >= FB_CCA_MIN_BLOCK : rem > FB_CCA_SMALL_SIZE;
}

fb_status fb_cca_malloc(fb_cca *a, uint64_t key, int64_t bytes, int stream, double now,
                        fb_cca_malloc_info *info) {
  assert(a && info && key != 0 && bytes > 0 && stream >= 0);
  memset(info, 0, sizeof *info);
  const int64_t size = fb_cca_block_size(bytes);
  const bool small = size <= FB_CCA_SMALL_SIZE;
  /* two blocks at most are created (a segment and a split remainder) */
  if (!reserve_block(a, stream, small))
    return FB_ERR(FB_ENOMEM, "caching allocator: out of host memory");
  pool *p = pool_of(a, stream, small);
  if (!reserve((void **)&p->v, &p->cap, p->blocks + 2, sizeof *p->v))
    return FB_ERR(FB_ENOMEM, "caching allocator: out of host memory");
  process_events(a, now, false);

  blk *b = NULL;
  int64_t i = lower(p, size, INT64_MIN);
  if (i < p->n) { /* best fit: the smallest cached block that holds the request */
    b = p->v[i];
    pool_remove(p, b);
  } else {
    const int64_t seg = fb_cca_segment_size(size);
    if (a->st.reserved + seg > a->capacity && a->st.num_ooms > 0) {
      info->oom = true; /* a real run stopped at the first OOM: count, retry no more */
      a->st.num_ooms++;
    } else if (a->st.reserved + seg > a->capacity) {
      info->released = release_cached(a);
      info->retried = true;
      a->st.num_alloc_retries++;
      a->st.num_sync_all_streams++;
      if (a->st.reserved + seg > a->capacity) {
        info->oom = true;
        a->st.num_ooms++;
      }
    }
    b = new_block(a, a->next_addr, seg, stream, small);
    if (!b) return FB_ERR(FB_ENOMEM, "caching allocator: out of host memory");
    a->next_addr += seg;
    a->st.reserved += seg;
    p->reserved += seg;
    a->st.segments++;
    if (a->st.segments > a->st.segments_peak) a->st.segments_peak = a->st.segments;
    a->st.num_device_alloc++;
    info->segment = seg;
  }
  if (should_split(b, size)) {
    blk *r = new_block(a, b->addr + size, b->size - size, stream, small);
    if (!r) {
      pool_insert(p, b);
      return FB_ERR(FB_ENOMEM, "caching allocator: out of host memory");
    }
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool_insert(p, r);
  }
  b->allocated = true;
  b->key = key;
  b->requested = bytes;
  map_put(a, key, b);
  a->nlive++;
  info->block = b->size;
  fb_cca_stats *s = &a->st;
  s->allocated += b->size;
  s->requested += bytes;
  s->active += b->size;
  if (s->active > s->active_peak) s->active_peak = s->active;
  if (s->allocated >= s->allocated_peak) {
    s->allocated_peak = s->allocated;
    s->reserved_at_allocated_peak = s->reserved;
  }
  if (s->reserved > s->reserved_peak) {
    s->reserved_peak = s->reserved;
    s->allocated_at_reserved_peak = s->allocated;
    s->active_at_reserved_peak = s->active;
    s->side_at_reserved_peak = s->reserved;
    for (int k = 0; k < 2 && a->nstreams > 0; k++) s->side_at_reserved_peak -= a->pools[k].reserved;
  }
  return FB_OK;
}

void fb_cca_free(fb_cca *a, uint64_t key, int use_stream, double ready_at) {
  blk *b = map_take(a, key);
  if (!b) return;
  b->allocated = false;
  a->st.allocated -= b->size;
  a->st.requested -= b->requested;
  if (use_stream >= 0 && use_stream != b->stream) { /* record_stream: held until ready */
    b->held = true;
    b->ready = ready_at;
    a->held[a->nheld++] = b; /* capacity reserved by the malloc */
    a->st.held++;
    return;
  }
  a->nlive--;
  free_block(a, b);
}

int64_t fb_cca_block_of(const fb_cca *a, uint64_t key) {
  int64_t j = map_find(a, key);
  return j < 0 ? 0 : a->vals[j]->size;
}

int64_t fb_cca_addr_of(const fb_cca *a, uint64_t key) {
  int64_t j = map_find(a, key);
  return j < 0 ? -1 : a->vals[j]->addr;
}

/* ---- walk (the snapshot's segments) ------------------------------------------------------ */

static int cmp_blk_addr(const void *x, const void *y) {
  const blk *a = *(blk *const *)x, *b = *(blk *const *)y;
  return (a->addr > b->addr) - (a->addr < b->addr);
}

/* Every block: the cached ones (pools), the held ones and the allocated ones (the map). */
static int64_t collect_blocks(const fb_cca *a, blk **v) {
  int64_t n = 0;
  for (int i = 0; i < 2 * a->nstreams; i++)
    for (int64_t j = 0; j < a->pools[i].n; j++) v[n++] = a->pools[i].v[j];
  for (int64_t i = 0; i < a->nheld; i++) v[n++] = a->held[i];
  for (int64_t i = 0; i < a->mcap; i++)
    if (a->keys[i]) v[n++] = a->vals[i];
  return n;
}

fb_status fb_cca_walk(const fb_cca *a, fb_cca_visit fn, void *ctx) {
  assert(a && fn);
  int64_t cap = a->nheld + a->mn;
  for (int i = 0; i < 2 * a->nstreams; i++) cap += a->pools[i].n;
  blk **v = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *v);
  if (!v) return FB_ERR(FB_ENOMEM, "caching allocator: out of host memory (%lld blocks)",
                        (long long)cap);
  const int64_t n = collect_blocks(a, v);
  assert(n == cap);
  qsort(v, (size_t)n, sizeof *v, cmp_blk_addr);
  fb_status st = FB_OK;
  int64_t seg = 0, seg_size = 0;
  for (int64_t i = 0; i < n && st == FB_OK; i++) {
    const blk *b = v[i];
    if (!b->prev) { /* a segment starts: its blocks follow in address order */
      seg = b->addr;
      seg_size = 0;
      for (const blk *o = b; o; o = o->next) seg_size += o->size;
    }
    assert(b->addr >= seg && b->addr + b->size <= seg + seg_size);
    const bool live = b->allocated || b->held;
    const fb_cca_block info = {.segment = seg, .segment_size = seg_size, .addr = b->addr,
                               .size = b->size, .requested = live ? b->requested : 0,
                               .stream = b->stream, .small = b->small,
                               .allocated = b->allocated, .held = b->held,
                               .key = live ? b->key : 0};
    st = fn(ctx, &info);
  }
  free(v);
  return st;
}

void fb_cca_get_stats(const fb_cca *a, fb_cca_stats *out) { *out = a->st; }
