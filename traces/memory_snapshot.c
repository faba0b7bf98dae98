/* Memory snapshot writer (memory_snapshot.h): replays the recorder's memory events of each
 * rank, gives every allocation a synthetic address, and writes PyTorch's snapshot JSON.
 * It does not read or change the device's live accounting. */
#include "memory_snapshot.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/core/json_out.h"

#define SNAP_ALIGN 512

typedef struct live_buf {
  int64_t id;        /* INT64_MIN = empty slot */
  int64_t addr, size;
  double t;
  fb_mem_cat cat;
  const char *label;
  bool live;
} live_buf;

typedef struct buf_map {
  live_buf *slot;
  size_t cap;        /* power of two */
} buf_map;

static size_t hash_id(int64_t id) {
  uint64_t x = (uint64_t)id * 0x9E3779B97F4A7C15ull;
  return (size_t)(x ^ (x >> 29));
}

/* Slot holding id, or the empty slot where it would go. */
static live_buf *map_find(buf_map *m, int64_t id) {
  size_t i = hash_id(id) & (m->cap - 1);
  while (m->slot[i].id != INT64_MIN && m->slot[i].id != id) i = (i + 1) & (m->cap - 1);
  return &m->slot[i];
}

static void frames(FILE *f, const char *label, fb_mem_cat cat, int rank) {
  fputs("[{\"filename\":", f);
  fb_json_str(f, fb_mem_cat_name(cat));
  fputs(",\"line\":0,\"name\":", f);
  fb_json_str(f, label ? label : fb_mem_cat_name(cat));
  fprintf(f, "},{\"filename\":\"fsdpbench\",\"line\":%d,\"name\":\"rank %d\"}]", rank, rank);
}

static void trace_entry(FILE *f, bool *first, const char *action, const live_buf *b, double t,
                        int rank) {
  fputs(*first ? "\n" : ",\n", f);
  *first = false;
  fprintf(f, "{\"action\":\"%s\",\"addr\":%lld,\"size\":%lld,\"stream\":0,\"time_us\":%lld,"
             "\"frames\":", action, (long long)b->addr, (long long)b->size,
          (long long)llround(t * 1e6));
  frames(f, b->label, b->cat, rank);
  fputc('}', f);
}

static int cmp_addr(const void *a, const void *b) {
  const live_buf *x = *(live_buf *const *)a, *y = *(live_buf *const *)b;
  return (x->addr > y->addr) - (x->addr < y->addr);
}

static fb_status write_rank(const char *dir, const fb_rank_result *rk) {
  char name[64];
  snprintf(name, sizeof name, "rank%d_memory_snapshot.json", rk->rank);
  int64_t n = 0;
  const fb_rec_mem *ev = rk->rec ? fb_recorder_mems(rk->rec, &n) : NULL;
  buf_map m = {.cap = 64};
  while (m.cap < 2 * (size_t)n + 2) m.cap *= 2;
  m.slot = malloc(m.cap * sizeof *m.slot);
  live_buf **alive = malloc(m.cap * sizeof *alive);
  if (!m.slot || !alive) {
    free(m.slot);
    free(alive);
    return FB_ERR(FB_ENOMEM, "memory snapshot: out of host memory (%lld events)", (long long)n);
  }
  for (size_t i = 0; i < m.cap; i++) m.slot[i].id = INT64_MIN;

  FILE *f;
  fb_status st = fb_json_open(dir, name, &f);
  if (st != FB_OK) goto done;
  fputs("{\"device_traces\":[[", f);
  bool first = true;
  int64_t next_addr = SNAP_ALIGN;
  for (int64_t k = 0; k < n; k++) {
    const fb_rec_mem *e = &ev[k];
    if (e->delta == 0) continue; /* baseline samples carry no allocation */
    int64_t size = e->delta > 0 ? e->delta : -e->delta;
    live_buf *b = map_find(&m, e->id);
    if (e->delta > 0) {
      *b = (live_buf){.id = e->id, .addr = next_addr, .size = size, .t = e->t, .cat = e->cat,
                      .label = e->label, .live = true};
      next_addr += (size + SNAP_ALIGN - 1) / SNAP_ALIGN * SNAP_ALIGN;
      trace_entry(f, &first, "segment_alloc", b, e->t, rk->rank);
      trace_entry(f, &first, "alloc", b, e->t, rk->rank);
    } else {
      if (b->id == INT64_MIN || !b->live) {
        /* Allocated before the kept window: the viewer shows it as initially allocated. */
        *b = (live_buf){.id = e->id, .addr = next_addr, .size = size, .t = e->t, .cat = e->cat,
                        .label = e->label};
        next_addr += (size + SNAP_ALIGN - 1) / SNAP_ALIGN * SNAP_ALIGN;
      }
      b->live = false;
      trace_entry(f, &first, "free_requested", b, e->t, rk->rank);
      trace_entry(f, &first, "free_completed", b, e->t, rk->rank);
      trace_entry(f, &first, "segment_free", b, e->t, rk->rank);
    }
  }
  fputs("\n]],\n\"segments\":[", f);
  size_t na = 0;
  for (size_t i = 0; i < m.cap; i++)
    if (m.slot[i].id != INT64_MIN && m.slot[i].live) alive[na++] = &m.slot[i];
  qsort(alive, na, sizeof *alive, cmp_addr);
  for (size_t i = 0; i < na; i++) {
    const live_buf *b = alive[i];
    fprintf(f, "%s\n{\"device\":0,\"address\":%lld,\"total_size\":%lld,\"allocated_size\":%lld,"
               "\"active_size\":%lld,\"requested_size\":%lld,\"stream\":0,"
               "\"segment_type\":\"%s\",\"segment_pool_id\":[0,0],\"is_expandable\":false,"
               "\"frames\":", i ? "," : "", (long long)b->addr, (long long)b->size,
            (long long)b->size, (long long)b->size, (long long)b->size,
            b->size > (1 << 20) ? "large" : "small");
    frames(f, b->label, b->cat, rk->rank);
    fprintf(f, ",\"blocks\":[{\"address\":%lld,\"size\":%lld,\"requested_size\":%lld,"
               "\"state\":\"active_allocated\",\"frames\":", (long long)b->addr,
            (long long)b->size, (long long)b->size);
    frames(f, b->label, b->cat, rk->rank);
    fputs("}]}", f);
  }
  fputs("\n]}\n", f);
  st = fb_json_close(f, name);
done:
  free(m.slot);
  free(alive);
  return st;
}

fb_status fb_memsnap_write(const char *dir, const fb_run_result *r) {
  assert(r);
  FB_TRY(fb_mkdir_p(dir));
  for (int i = 0; i < r->nranks; i++) FB_TRY(write_rank(dir, &r->ranks[i]));
  return FB_OK;
}
