/* Memory snapshot writer (memory_snapshot.h): replays each rank's memory events on the
 * caching-allocator model, writing one device_traces entry per allocator action as it goes,
 * then walks the model's final state for "segments". Everything goes through the streaming
 * pickle writer (pickle_writer.h). It does not read or change the device's live accounting. */
#include "memory_snapshot.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/core/json_out.h"
#include "../engine/sim/caching_allocator.h"
#include "pickle_writer.h"

/* key (allocation id + 1) -> index of its alloc event; keys are never reused in a run */
typedef struct key_slot {
  uint64_t key; /* 0 = empty */
  int64_t ev;
} key_slot;

typedef struct seg_of {
  int64_t addr, ev; /* a segment and the event whose allocation made it */
} seg_of;

typedef struct snap {
  fb_pkl pk;
  const fb_run_result *res;
  int rank;
  const fb_rec_mem *ev;
  int64_t nev;          /* events kept: up to the end of the last step */
  fb_cca *cca;
  key_slot *keys;
  size_t kcap;          /* power of two */
  seg_of *segs;         /* in address order (the model lays segments out upwards) */
  int64_t nsegs, capsegs;
  fb_cca_block *blocks; /* the model's final state */
  int64_t nblocks, capblocks;
} snap;

/* ---- key map ------------------------------------------------------------------------------ */

static key_slot *key_find(snap *s, uint64_t key) {
  size_t i = (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 17) & (s->kcap - 1);
  while (s->keys[i].key && s->keys[i].key != key) i = (i + 1) & (s->kcap - 1);
  return &s->keys[i];
}

static const fb_rec_mem *alloc_event(snap *s, uint64_t key) {
  key_slot *k = key_find(s, key);
  assert(k->key == key && "snapshot: a live block without its alloc event");
  return &s->ev[k->ev];
}

/* ---- frames ------------------------------------------------------------------------------- */

static void frame(fb_pkl *p, const char *name, const char *filename, int64_t line) {
  fb_pkl_dict(p);
  fb_pkl_key(p, "name");
  fb_pkl_str(p, name);
  fb_pkl_key(p, "filename");
  fb_pkl_str(p, filename);
  fb_pkl_key(p, "line");
  fb_pkl_int(p, line);
  fb_pkl_close(p);
}

/* [{"<strategy> <op> <unit> [<category>]", file <label>}, {"step N", file "rank R"}] */
static void frames(snap *s, const fb_rec_mem *e) {
  char unit[64] = "", name[256], where[32], when[32];
  if (e->op && e->unit >= 0) fb_model_unit_name(&s->res->model, e->unit, unit, sizeof unit);
  snprintf(name, sizeof name, "%s %s%s%s [%s]", s->res->cfg.strategy, e->op ? e->op : e->label,
           unit[0] ? " " : "", unit, fb_mem_cat_name(e->cat));
  snprintf(where, sizeof where, "rank %d", s->rank);
  if (e->step >= 0) snprintf(when, sizeof when, "step %d", fb_step_number(e->step)); /* log's */
  else snprintf(when, sizeof when, "outside steps");
  fb_pkl_list(&s->pk);
  frame(&s->pk, name, e->label, 0);
  frame(&s->pk, when, where, 0);
  fb_pkl_close(&s->pk);
}

/* ---- device_traces ------------------------------------------------------------------------ */

/* category: the recorder's name for the event's category; segment events carry "unknown"
 * (they belong to no one category, and the viewer expects "unknown" among the categories
 * whenever entries have one). */
static void trace_entry(snap *s, const char *action, int64_t addr, int64_t size,
                        const fb_rec_mem *e, bool segment) {
  fb_pkl *p = &s->pk;
  fb_pkl_dict(p);
  fb_pkl_key(p, "action");
  fb_pkl_str(p, action);
  fb_pkl_key(p, "addr");
  fb_pkl_int(p, addr);
  fb_pkl_key(p, "size");
  fb_pkl_int(p, size);
  fb_pkl_key(p, "stream");
  fb_pkl_int(p, 0);
  fb_pkl_key(p, "time_us");
  fb_pkl_int(p, llround(e->t * 1e6));
  fb_pkl_key(p, "category");
  fb_pkl_str(p, segment ? "unknown" : fb_mem_cat_name(e->cat));
  fb_pkl_key(p, "frames");
  frames(s, e);
  fb_pkl_close(p);
}

static fb_status replay_alloc(snap *s, int64_t k) {
  const fb_rec_mem *e = &s->ev[k];
  const uint64_t key = (uint64_t)e->id + 1;
  fb_cca_malloc_info info;
  FB_TRY(fb_cca_malloc(s->cca, key, e->delta, 0, e->t, &info));
  assert(!info.retried && "snapshot: the replay has no capacity limit");
  key_slot *ks = key_find(s, key);
  *ks = (key_slot){.key = key, .ev = k};
  const int64_t addr = fb_cca_addr_of(s->cca, key);
  if (info.segment > 0) { /* a new segment: its first block is this one */
    if (s->nsegs == s->capsegs) {
      int64_t cap = s->capsegs ? 2 * s->capsegs : 64;
      seg_of *v = realloc(s->segs, (size_t)cap * sizeof *v);
      if (!v) return FB_ERR(FB_ENOMEM, "memory snapshot: out of host memory");
      s->segs = v;
      s->capsegs = cap;
    }
    assert(s->nsegs == 0 || s->segs[s->nsegs - 1].addr < addr);
    s->segs[s->nsegs++] = (seg_of){.addr = addr, .ev = k};
    trace_entry(s, "segment_alloc", addr, info.segment, e, true);
  }
  trace_entry(s, "alloc", addr, e->delta, e, false);
  return FB_OK;
}

static void replay_free(snap *s, const fb_rec_mem *e) {
  const uint64_t key = (uint64_t)e->id + 1;
  const int64_t addr = fb_cca_addr_of(s->cca, key);
  if (addr < 0) return; /* not allocated in the kept timeline: nothing to free */
  trace_entry(s, "free_requested", addr, -e->delta, e, false);
  trace_entry(s, "free_completed", addr, -e->delta, e, false);
  fb_cca_free(s->cca, key, -1, 0);
}

static fb_status device_traces(snap *s) {
  fb_pkl_key(&s->pk, "device_traces");
  fb_pkl_list(&s->pk);
  fb_pkl_list(&s->pk);
  for (int64_t k = 0; k < s->nev; k++) {
    const fb_rec_mem *e = &s->ev[k];
    if (e->delta == 0 || e->id < 0) continue; /* baseline samples carry no allocation */
    if (e->delta > 0) FB_TRY(replay_alloc(s, k));
    else replay_free(s, e);
  }
  fb_pkl_close(&s->pk);
  fb_pkl_close(&s->pk);
  return FB_OK;
}

/* ---- segments ----------------------------------------------------------------------------- */

static fb_status keep_block(void *ctx, const fb_cca_block *b) {
  snap *s = ctx;
  if (s->nblocks == s->capblocks) {
    int64_t cap = s->capblocks ? 2 * s->capblocks : 64;
    fb_cca_block *v = realloc(s->blocks, (size_t)cap * sizeof *v);
    if (!v) return FB_ERR(FB_ENOMEM, "memory snapshot: out of host memory");
    s->blocks = v;
    s->capblocks = cap;
  }
  s->blocks[s->nblocks++] = *b;
  return FB_OK;
}

static const fb_rec_mem *segment_event(const snap *s, int64_t addr) {
  int64_t lo = 0, hi = s->nsegs;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (s->segs[mid].addr < addr) lo = mid + 1;
    else hi = mid;
  }
  assert(lo < s->nsegs && s->segs[lo].addr == addr && "snapshot: a segment without its event");
  return &s->ev[s->segs[lo].ev];
}

static void block(snap *s, const fb_cca_block *b) {
  fb_pkl *p = &s->pk;
  fb_pkl_dict(p);
  fb_pkl_key(p, "address");
  fb_pkl_int(p, b->addr);
  fb_pkl_key(p, "size");
  fb_pkl_int(p, b->size);
  fb_pkl_key(p, "requested_size");
  fb_pkl_int(p, b->requested);
  fb_pkl_key(p, "state");
  fb_pkl_str(p, b->allocated ? "active_allocated" : b->held ? "active_pending_free" : "inactive");
  fb_pkl_key(p, "frames");
  if (b->allocated || b->held) {
    frames(s, alloc_event(s, b->key));
  } else {
    fb_pkl_list(p);
    fb_pkl_close(p);
  }
  fb_pkl_close(p);
}

static void seg_int(fb_pkl *p, const char *k, int64_t v) {
  fb_pkl_key(p, k);
  fb_pkl_int(p, v);
}

/* One segment: blocks [i, j) of s->blocks. */
static void segment(snap *s, int64_t i, int64_t j) {
  const fb_cca_block *b0 = &s->blocks[i];
  int64_t allocated = 0, active = 0, requested = 0;
  for (int64_t k = i; k < j; k++) {
    const fb_cca_block *b = &s->blocks[k];
    if (b->allocated) allocated += b->size;
    if (b->allocated || b->held) {
      active += b->size;
      requested += b->requested;
    }
  }
  fb_pkl *p = &s->pk;
  fb_pkl_dict(p);
  seg_int(p, "device", 0);
  seg_int(p, "address", b0->segment);
  seg_int(p, "total_size", b0->segment_size);
  seg_int(p, "allocated_size", allocated);
  seg_int(p, "active_size", active);
  seg_int(p, "requested_size", requested);
  seg_int(p, "stream", b0->stream);
  fb_pkl_key(p, "segment_type");
  fb_pkl_str(p, b0->small ? "small" : "large");
  fb_pkl_key(p, "segment_pool_id");
  fb_pkl_list(p);
  fb_pkl_int(p, 0);
  fb_pkl_int(p, 0);
  fb_pkl_close(p);
  fb_pkl_key(p, "is_expandable");
  fb_pkl_bool(p, false);
  fb_pkl_key(p, "frames");
  frames(s, segment_event(s, b0->segment));
  fb_pkl_key(p, "blocks");
  fb_pkl_list(p);
  for (int64_t k = i; k < j; k++) block(s, &s->blocks[k]);
  fb_pkl_close(p);
  fb_pkl_close(p);
}

static fb_status segments(snap *s) {
  FB_TRY(fb_cca_walk(s->cca, keep_block, s));
  fb_pkl_key(&s->pk, "segments");
  fb_pkl_list(&s->pk);
  for (int64_t i = 0, j; i < s->nblocks; i = j) {
    for (j = i + 1; j < s->nblocks && s->blocks[j].segment == s->blocks[i].segment; j++) {}
    segment(s, i, j);
  }
  fb_pkl_close(&s->pk);
  return FB_OK;
}

/* ---- one rank ----------------------------------------------------------------------------- */

/* Events up to the last one of a step: what follows is the run freeing its buffers. */
static int64_t kept_events(const fb_rec_mem *ev, int64_t n) {
  for (int64_t k = n; k > 0; k--)
    if (ev[k - 1].step >= 0) return k;
  return n;
}

static fb_status write_rank(const char *dir, const fb_run_result *r, const fb_rank_result *rk) {
  char name[64];
  snprintf(name, sizeof name, "rank%d_memory_snapshot.pickle", rk->rank);
  int64_t n = 0;
  const fb_rec_mem *ev = rk->rec ? fb_recorder_mems(rk->rec, &n) : NULL;
  snap s = {.res = r, .rank = rk->rank, .ev = ev, .nev = kept_events(ev, n), .kcap = 64};
  while (s.kcap < 2 * (size_t)s.nev + 2) s.kcap *= 2;
  FILE *f = NULL;
  fb_status st = fb_cca_create(INT64_MAX / 4, &s.cca);
  if (st != FB_OK) goto out;
  s.keys = calloc(s.kcap, sizeof *s.keys);
  if (!s.keys) {
    st = FB_ERR(FB_ENOMEM, "memory snapshot: out of host memory (%lld events)", (long long)n);
    goto out;
  }
  st = fb_json_open(dir, name, &f);
  if (st != FB_OK) goto out;
  fb_pkl_begin(&s.pk, f);
  fb_pkl_dict(&s.pk);
  st = device_traces(&s);
  if (st == FB_OK) st = segments(&s);
  if (st == FB_OK) {
    fb_pkl_close(&s.pk);
    fb_pkl_end(&s.pk);
  }
  if (st == FB_OK) st = fb_json_close(f, name);
  else fb_json_discard(f); /* a half-written snapshot must not stay behind */
out:
  fb_cca_destroy(s.cca);
  free(s.keys);
  free(s.segs);
  free(s.blocks);
  return st;
}

fb_status fb_memsnap_write(const char *dir, const fb_run_result *r) {
  assert(r);
  FB_TRY(fb_mkdir_p(dir));
  for (int i = 0; i < r->nranks; i++) FB_TRY(write_rank(dir, r, &r->ranks[i]));
  return FB_OK;
}
