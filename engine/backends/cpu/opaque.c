/* The opaque device's guard (see opaque.h): protected mappings (and the released ones kept for
 * reuse), per-block access records and the vector clocks that decide whether two accesses are
 * ordered. It runs no kernel and counts no memory. One mutex guards everything: the guard is a
 * test device, not a fast one. */
#define _GNU_SOURCE
#include "opaque.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../core/grow.h"

typedef struct rec {      /* one access of a byte range of a block */
  int s;                  /* stream slot */
  uint64_t seq;           /* its op number on that stream */
  size_t lo, hi;          /* bytes [lo, hi) from the block's start */
  fb_access mode;
  const char *name;       /* the op (static string) */
} rec;

typedef struct block {
  char *base;
  size_t bytes, mapped;
  int64_t id;             /* allocation number on this device */
  fb_mem_cat cat;
  int open;               /* ops using it right now */
  rec *recs;
  int64_t nrec, caprec;
} block;

struct fb_opq {
  pthread_mutex_t mu;
  int rank;
  size_t page;
  block **blocks;         /* sorted by base */
  int64_t nblocks, capblocks, next_id;
  int nstreams;
  char sname[FB_OPQ_STREAMS][24];
  fb_opq_clock vc[FB_OPQ_STREAMS + 1]; /* per stream, then the host */
  fb_status err;
  char msg[512];
  /* mappings of released blocks, kept for the next allocation of their size (newest last) */
  struct kept { char *base; size_t mapped; } *kept;
  int64_t nkept, capkept;
  size_t kept_bytes, live_bytes, peak_live;
};

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

static void merge(fb_opq_clock *dst, const fb_opq_clock *src) {
  for (int i = 0; i <= FB_OPQ_STREAMS; i++) dst->t[i] = max_u64(dst->t[i], src->t[i]);
}

static const char *slot_name(const fb_opq *g, int s) {
  return s == FB_OPQ_HOST ? "host" : g->sname[s];
}

fb_status fb_opq_create(int rank, fb_opq **out) {
  *out = NULL;
  fb_opq *g = calloc(1, sizeof *g);
  if (!g) return FB_ERR(FB_ENOMEM, "opaque device: out of host memory");
  if (pthread_mutex_init(&g->mu, NULL) != 0) {
    free(g);
    return FB_ERR(FB_EINTERNAL, "opaque device: pthread_mutex_init failed");
  }
  g->rank = rank;
  long pg = sysconf(_SC_PAGESIZE);
  g->page = pg > 0 ? (size_t)pg : 4096;
  *out = g;
  return FB_OK;
}

static void drop_block(block *b) {
  munmap(b->base, b->mapped);
  free(b->recs);
  free(b);
}

/* Unmaps kept mappings, oldest first, until at most `limit` bytes are kept. */
static void trim_kept(fb_opq *g, size_t limit) {
  int64_t k = 0;
  while (k < g->nkept && g->kept_bytes > limit) {
    munmap(g->kept[k].base, g->kept[k].mapped);
    g->kept_bytes -= g->kept[k++].mapped;
  }
  if (k == 0) return;
  memmove(g->kept, g->kept + k, (size_t)(g->nkept - k) * sizeof *g->kept);
  g->nkept -= k;
}

void fb_opq_destroy(fb_opq *g) {
  if (!g) return;
  for (int64_t i = 0; i < g->nblocks; i++) drop_block(g->blocks[i]);
  trim_kept(g, 0);
  free(g->kept);
  free(g->blocks);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

/* Index of the first block whose base is > p (blocks sorted by base). */
static int64_t upper(const fb_opq *g, const void *p) {
  int64_t lo = 0, hi = g->nblocks;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if ((const char *)g->blocks[mid]->base <= (const char *)p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The block holding [p, p+bytes), or NULL. */
static block *find(const fb_opq *g, const void *p, size_t bytes) {
  int64_t i = upper(g, p) - 1;
  if (i < 0) return NULL;
  block *b = g->blocks[i];
  size_t off = (size_t)((const char *)p - b->base);
  if (bytes == FB_OPND_REST || bytes == 0) return off < b->bytes ? b : NULL;
  return off + bytes <= b->bytes ? b : NULL;
}

/* A mapping of `mapped` bytes, PROT_NONE: the newest kept one of that size, else a new one
 * (after unmapping every kept one when the first try fails). Called with g->mu held. */
static char *take_mapping(fb_opq *g, size_t mapped) {
  for (int64_t k = g->nkept - 1; k >= 0; k--) {
    if (g->kept[k].mapped != mapped) continue;
    char *m = g->kept[k].base;
    memmove(&g->kept[k], &g->kept[k + 1], (size_t)(g->nkept - k - 1) * sizeof *g->kept);
    g->nkept--;
    g->kept_bytes -= mapped;
    return m;
  }
  for (int tries = 0; tries < 2; tries++) {
    void *m = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED) return m;
    trim_kept(g, 0);
  }
  return NULL;
}

fb_status fb_opq_alloc(fb_opq *g, size_t bytes, fb_mem_cat cat, void **out) {
  *out = NULL;
  const size_t mapped = (bytes + g->page - 1) / g->page * g->page;
  block *b = calloc(1, sizeof *b);
  if (!b) return FB_ERR(FB_ENOMEM, "opaque device: out of host memory");
  pthread_mutex_lock(&g->mu);
  char *m = take_mapping(g, mapped);
  if (!m) {
    pthread_mutex_unlock(&g->mu);
    free(b);
    return FB_ERR(FB_ENOMEM, "rank %d: opaque device: cannot map %zu bytes for %s", g->rank,
                  bytes, fb_mem_cat_name(cat));
  }
  b->base = m;
  b->bytes = bytes;
  b->mapped = mapped;
  b->cat = cat;
  b->id = g->next_id++;
  if (!fb_grow((void **)&g->blocks, &g->capblocks, g->nblocks + 1, sizeof *g->blocks, 64)) {
    pthread_mutex_unlock(&g->mu);
    drop_block(b);
    return FB_ERR(FB_ENOMEM, "opaque device: out of host memory");
  }
  int64_t i = upper(g, m);
  memmove(&g->blocks[i + 1], &g->blocks[i], (size_t)(g->nblocks - i) * sizeof *g->blocks);
  g->blocks[i] = b;
  g->nblocks++;
  g->live_bytes += mapped;
  if (g->live_bytes > g->peak_live) g->peak_live = g->live_bytes;
  pthread_mutex_unlock(&g->mu);
  *out = m;
  return FB_OK;
}

static void set_error(fb_opq *g, const char *msg) {
  fprintf(stderr, "fsdpbench: %s\n", msg);
  if (g->err == FB_OK) {
    g->err = FB_EINTERNAL;
    snprintf(g->msg, sizeof g->msg, "%s", msg);
  }
}

/* Whether an access recorded as r is ordered before the point whose clock is c. */
static bool ordered(const rec *r, const fb_opq_clock *c) { return c->t[r->s] >= r->seq; }

bool fb_opq_free_check(fb_opq *g, const void *p, int s) {
  bool ok = true;
  pthread_mutex_lock(&g->mu);
  block *b = find(g, p, 0);
  const int slot = s < 0 ? FB_OPQ_HOST : s;
  fb_opq_clock c = g->vc[slot];
  if (slot != FB_OPQ_HOST) merge(&c, &g->vc[FB_OPQ_HOST]);
  for (int64_t i = 0; b && i < b->nrec; i++) {
    const rec *r = &b->recs[i];
    if (r->s == slot || ordered(r, &c)) continue;
    char msg[512];
    snprintf(msg, sizeof msg,
             "rank %d: stream-unsafe free: %s block #%lld (%zu bytes) freed %s while '%s' on "
             "stream '%s' (op %llu) may still use it: no event or sync orders the use before "
             "the free",
             g->rank, fb_mem_cat_name(b->cat), (long long)b->id, b->bytes,
             s < 0 ? "by the host" : "on a stream", r->name, slot_name(g, r->s),
             (unsigned long long)r->seq);
    if (s >= 0) {
      size_t o = strlen(msg);
      snprintf(msg + o, sizeof msg - o, " (free ordered on stream '%s')", slot_name(g, s));
    }
    set_error(g, msg);
    ok = false;
    break;
  }
  pthread_mutex_unlock(&g->mu);
  return ok;
}

void fb_opq_release(fb_opq *g, void *p) {
  pthread_mutex_lock(&g->mu);
  int64_t i = upper(g, p) - 1;
  block *b = i >= 0 ? g->blocks[i] : NULL;
  assert(b && b->base == p && "opaque device: release of a pointer it did not allocate");
  assert(b->open == 0 && "opaque device: block released while an op uses it");
  memmove(&g->blocks[i], &g->blocks[i + 1], (size_t)(g->nblocks - i - 1) * sizeof *g->blocks);
  g->nblocks--;
  g->live_bytes -= b->mapped;
  /* keep the mapping (PROT_NONE: no op has it open) unless the list cannot grow */
  bool kept = fb_grow((void **)&g->kept, &g->capkept, g->nkept + 1, sizeof *g->kept, 64);
  if (kept) {
    g->kept[g->nkept++] = (struct kept){.base = b->base, .mapped = b->mapped};
    g->kept_bytes += b->mapped;
    trim_kept(g, g->peak_live);
  }
  pthread_mutex_unlock(&g->mu);
  if (!kept) munmap(b->base, b->mapped);
  free(b->recs);
  free(b);
}

fb_status fb_opq_stream_add(fb_opq *g, const char *name, int *idx) {
  pthread_mutex_lock(&g->mu);
  if (g->nstreams >= FB_OPQ_STREAMS) {
    pthread_mutex_unlock(&g->mu);
    return FB_ERR(FB_EUNSUPPORTED, "opaque device: more than %d streams", FB_OPQ_STREAMS);
  }
  *idx = g->nstreams++;
  snprintf(g->sname[*idx], sizeof g->sname[*idx], "%s", name);
  pthread_mutex_unlock(&g->mu);
  return FB_OK;
}

static const char *mode_name(fb_access m) {
  return m == FB_ACC_READ ? "reads" : m == FB_ACC_WRITE ? "writes" : "updates";
}

/* Drops records every stream and the host already know about (no later access can race
 * them), and records of stream s that the new access r covers. */
static void prune(fb_opq *g, block *b, const rec *r) {
  int64_t k = 0;
  for (int64_t i = 0; i < b->nrec; i++) {
    rec *o = &b->recs[i];
    bool known = ordered(o, &g->vc[FB_OPQ_HOST]);
    for (int s = 0; known && s < g->nstreams; s++) known = ordered(o, &g->vc[s]);
    bool covered = o->lo >= r->lo && o->hi <= r->hi &&
                   (o->s == r->s ? (r->mode & FB_ACC_WRITE) || o->mode == FB_ACC_READ
                                 : (r->mode & FB_ACC_WRITE) && ordered(o, &g->vc[r->s]));
    if (!known && !covered) b->recs[k++] = *o;
  }
  b->nrec = k;
}

/* Checks one operand of an op on stream s (clock c, op number seq) and records it. */
static fb_status access_one(fb_opq *g, int s, const char *name, const fb_operand *v, int idx) {
  block *b = find(g, v->p, v->bytes);
  if (!b)
    return FB_ERR(FB_EINTERNAL,
                  "rank %d: '%s' on stream '%s': operand %d (%p, %zu bytes) is not device "
                  "memory (a host pointer given to a device op)",
                  g->rank, name, slot_name(g, s), idx, v->p, v->bytes);
  const fb_opq_clock *c = &g->vc[s];
  rec r = {.s = s, .seq = c->t[s], .lo = (size_t)((const char *)v->p - b->base),
           .mode = v->mode, .name = name};
  r.hi = v->bytes == FB_OPND_REST ? b->bytes : r.lo + v->bytes;
  for (int64_t i = 0; i < b->nrec; i++) {
    const rec *o = &b->recs[i];
    if (o->s == s || o->hi <= r.lo || o->lo >= r.hi) continue;
    if (!(o->mode & FB_ACC_WRITE) && !(r.mode & FB_ACC_WRITE)) continue;
    if (ordered(o, c)) continue;
    return FB_ERR(FB_EINTERNAL,
                  "rank %d: missing wait: '%s' on stream '%s' %s bytes [%zu, %zu) of %s block "
                  "#%lld that '%s' on stream '%s' (op %llu) %s, and no event orders the two",
                  g->rank, name, slot_name(g, s), mode_name(r.mode), r.lo, r.hi,
                  fb_mem_cat_name(b->cat), (long long)b->id, o->name, slot_name(g, o->s),
                  (unsigned long long)o->seq, mode_name(o->mode));
  }
  if (b->nrec >= 32) prune(g, b, &r);
  if (!fb_grow((void **)&b->recs, &b->caprec, b->nrec + 1, sizeof *b->recs, 8))
    return FB_ERR(FB_ENOMEM, "opaque device: out of host memory");
  b->recs[b->nrec++] = r;
  return FB_OK;
}

fb_status fb_opq_access(fb_opq *g, int s, const char *name, const fb_operand *v, int n) {
  assert(s >= 0 && s < FB_OPQ_STREAMS);
  pthread_mutex_lock(&g->mu);
  merge(&g->vc[s], &g->vc[FB_OPQ_HOST]); /* what the host knew when it issued the op */
  g->vc[s].t[s]++;
  fb_status st = g->err;
  if (st != FB_OK) fb_error_set(st, __FILE__, __LINE__, "%s", g->msg);
  for (int i = 0; i < n && st == FB_OK; i++)
    if (v[i].p && v[i].bytes) st = access_one(g, s, name, &v[i], i);
  pthread_mutex_unlock(&g->mu);
  return st;
}

fb_status fb_opq_open(fb_opq *g, const fb_operand *v, int n) {
  fb_status st = FB_OK;
  pthread_mutex_lock(&g->mu);
  for (int i = 0; i < n; i++) {
    if (!v[i].p || !v[i].bytes) continue;
    block *b = find(g, v[i].p, v[i].bytes);
    assert(b && "opaque device: open of an unchecked operand");
    if (b->open++ == 0 && mprotect(b->base, b->mapped, PROT_READ | PROT_WRITE) != 0) {
      b->open--;
      st = FB_ERR(FB_EINTERNAL, "opaque device: mprotect failed");
      break;
    }
  }
  pthread_mutex_unlock(&g->mu);
  return st;
}

void fb_opq_close(fb_opq *g, const fb_operand *v, int n) {
  pthread_mutex_lock(&g->mu);
  for (int i = 0; i < n; i++) {
    if (!v[i].p || !v[i].bytes) continue;
    block *b = find(g, v[i].p, v[i].bytes);
    assert(b && b->open > 0);
    if (--b->open == 0) (void)mprotect(b->base, b->mapped, PROT_NONE);
  }
  pthread_mutex_unlock(&g->mu);
}

void fb_opq_record(fb_opq *g, int s, fb_opq_clock *ev) {
  pthread_mutex_lock(&g->mu);
  merge(&g->vc[s], &g->vc[FB_OPQ_HOST]);
  *ev = g->vc[s];
  pthread_mutex_unlock(&g->mu);
}

void fb_opq_wait(fb_opq *g, int s, const fb_opq_clock *ev) {
  pthread_mutex_lock(&g->mu);
  merge(&g->vc[s], ev);
  pthread_mutex_unlock(&g->mu);
}

void fb_opq_host_event(fb_opq *g, const fb_opq_clock *ev) {
  pthread_mutex_lock(&g->mu);
  merge(&g->vc[FB_OPQ_HOST], ev);
  pthread_mutex_unlock(&g->mu);
}

void fb_opq_host_stream(fb_opq *g, int s) {
  pthread_mutex_lock(&g->mu);
  merge(&g->vc[FB_OPQ_HOST], &g->vc[s]);
  pthread_mutex_unlock(&g->mu);
}

fb_status fb_opq_error(fb_opq *g) {
  pthread_mutex_lock(&g->mu);
  fb_status st = g->err;
  if (st != FB_OK) fb_error_set(st, __FILE__, __LINE__, "%s", g->msg);
  pthread_mutex_unlock(&g->mu);
  return st;
}
