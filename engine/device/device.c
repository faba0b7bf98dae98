/* The backend-independent half of the device interface: opening and closing a device, tagged
 * allocations with per-category accounting (host program order), the events told to the
 * recorder. It implements no backend (engine/backends/cpu, sim, cuda) and lists none (the
 * registry is engine/backends/registry.c, above them); it moves no data; what an op costs is
 * op_cost.c. */
#include "device.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "recorder.h"

/* What fb_device_open really allocates: the public struct plus the allocator's private
 * state. fb_device is always the first member, so the two pointers convert freely. */
typedef struct device_priv {
  fb_device pub;
  pthread_mutex_t mu;   /* guards pub.mem and next_id */
  int64_t next_id;
} device_priv;

static device_priv *priv_of(fb_device *d) { return (device_priv *)d; }

bool fb_word_in(const char *word, const char *list) {
  const size_t n = strlen(word);
  for (const char *p = list; p && *p;) {
    while (*p == ' ') p++;
    const char *e = strchr(p, ' ');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && n && !strncmp(p, word, n)) return true;
    p += len;
  }
  return false;
}

fb_status fb_device_open(const fb_device_ops *ops, int rank, int world, int threads,
                         int64_t mem_limit, const struct fb_hardware *hw, fb_device **out) {
  *out = NULL;
  if (!ops) return FB_ERR(FB_EUSAGE, "device: no backend given");
  if (world < 1) return FB_ERR(FB_EUSAGE, "device %s: world %d must be >= 1", ops->name, world);
  if (rank < 0 || rank >= world)
    return FB_ERR(FB_EUSAGE, "device %s: rank %d out of range 0..%d", ops->name, rank, world - 1);
  if (threads < 1)
    return FB_ERR(FB_EUSAGE, "device %s: threads %d must be >= 1", ops->name, threads);
  if (mem_limit < 0)
    return FB_ERR(FB_EUSAGE, "device %s: mem_limit %lld must be >= 0 (0 = none)", ops->name,
                  (long long)mem_limit);
  device_priv *p = calloc(1, sizeof *p);
  if (!p) return FB_ERR(FB_ENOMEM, "device %s: out of host memory", ops->name);
  fb_status st = FB_OK;
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    st = FB_ERR(FB_EINTERNAL, "device %s: pthread_mutex_init failed", ops->name);
    goto fail_free;
  }
  fb_device *d = &p->pub;
  d->ops = ops;
  d->rank = rank;
  d->world = world;
  d->threads = threads;
  d->mem_limit = mem_limit;
  d->hw = hw;
  if (ops->init) FB_CHECK_GOTO(st, ops->init(d), fail_mutex);
  *out = d;
  return FB_OK;

fail_mutex:
  pthread_mutex_destroy(&p->mu);
fail_free:
  free(p);
  return st;
}

void fb_device_close(fb_device *d) {
  if (!d) return;
  if (d->ops->fini) d->ops->fini(d);
  device_priv *p = priv_of(d);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

static double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

fb_status fb_alloc(fb_device *d, size_t bytes, fb_mem_cat cat, const char *label, fb_buf *out) {
  return fb_alloc_on(d, NULL, bytes, cat, label, out);
}

fb_status fb_alloc_on(fb_device *d, fb_stream *s, size_t bytes, fb_mem_cat cat, const char *label,
                      fb_buf *out) {
  assert(d && out);
  assert(cat >= 0 && cat < FB_MEM_NCAT);
  *out = (fb_buf){.ptr = NULL, .bytes = 0, .cat = cat, .id = -1, .label = label};
  if (bytes == 0) return FB_OK;
  if (bytes > (size_t)INT64_MAX)
    return FB_ERR(FB_ENOMEM, "rank %d: %s allocation '%s' of %zu bytes is too large", d->rank,
                  fb_mem_cat_name(cat), label ? label : "?", bytes);
  device_priv *p = priv_of(d);
  const int64_t b = (int64_t)bytes;
  pthread_mutex_lock(&p->mu);
  const int64_t in_use = d->mem.cur_total;
  if (d->mem_limit > 0 && in_use + b > d->mem_limit) {
    pthread_mutex_unlock(&p->mu);
    return FB_ERR(FB_ENOMEM,
                  "rank %d: out of device memory: %s allocation '%s' of %.2f MiB would exceed "
                  "the limit (%.2f MiB in use, limit %.2f MiB)",
                  d->rank, fb_mem_cat_name(cat), label ? label : "?", mib(b), mib(in_use),
                  mib(d->mem_limit));
  }
  void *ptr = NULL;
  fb_status st = d->ops->alloc(d, s, bytes, cat, &ptr);
  if (st != FB_OK) {
    pthread_mutex_unlock(&p->mu);
    return st;
  }
  assert(ptr != NULL);
  fb_mem_stats *m = &d->mem;
  m->cur[cat] += b;
  if (m->cur[cat] > m->peak[cat]) m->peak[cat] = m->cur[cat];
  m->cur_total += b;
  if (m->cur_total > m->peak_total) {
    m->peak_total = m->cur_total;
    memcpy(m->at_peak, m->cur, sizeof m->at_peak);
  }
  m->n_alloc++;
  out->ptr = ptr;
  out->bytes = bytes;
  out->id = p->next_id++;
  if (d->rec) fb_recorder_mem(d->rec, fb_now(d), out, b, m);
  pthread_mutex_unlock(&p->mu);
  return FB_OK;
}

void fb_free(fb_device *d, fb_buf *b, fb_stream *after) {
  assert(d && b);
  if (b->bytes == 0) {
    b->ptr = NULL;
    return;
  }
  device_priv *p = priv_of(d);
  const int64_t n = (int64_t)b->bytes;
  pthread_mutex_lock(&p->mu);
  fb_mem_stats *m = &d->mem;
  assert(m->cur[b->cat] >= n && m->cur_total >= n);
  m->cur[b->cat] -= n;
  m->cur_total -= n;
  m->n_free++;
  if (d->rec) fb_recorder_mem(d->rec, fb_now(d), b, -n, m);
  pthread_mutex_unlock(&p->mu);
  d->ops->free(d, b->ptr, b->bytes, b->cat, after);
  b->ptr = NULL;
  b->bytes = 0;
}

fb_status fb_event_record(fb_device *d, fb_event *e, fb_stream *s) {
  if (d->rec) fb_recorder_event_record(d->rec, e, s);
  return d->ops->event_record(d, e, s);
}

fb_status fb_stream_wait(fb_device *d, fb_stream *s, fb_event *e) {
  if (d->rec) fb_recorder_stream_wait(d->rec, s, e);
  return d->ops->stream_wait(d, s, e);
}
