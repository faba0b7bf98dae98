/* Device registry and the backend-independent half of the device interface: opening and
 * closing a device, tagged allocations with per-category accounting (host program order),
 * collective names and byte counts. It does not implement any backend (device_cpu.c,
 * device_sim.c, device_cuda.c) nor move data. */
#include "device.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "recorder.h"
#include "device_cpu.h"

extern const fb_device_ops fb_sim_device_ops;
#ifdef FB_HAVE_CUDA
#include "cuda_module.h"
#endif

/* What fb_device_open really allocates: the public struct plus the allocator's private
 * state. fb_device is always the first member, so the two pointers convert freely. */
typedef struct device_priv {
  fb_device pub;
  pthread_mutex_t mu;   /* guards pub.mem and next_id */
  int64_t next_id;
} device_priv;

static device_priv *priv_of(fb_device *d) { return (device_priv *)d; }

/* Available host memory (MemAvailable), the cpu devices' capacity. */
static int64_t host_capacity(int ranks_here) {
  (void)ranks_here; /* ranks of one process share it: the fit check sums them */
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  long long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb > 0 ? (int64_t)kb * 1024 : -1;
}

static const fb_device_caps cpu_caps = {
    .host_access = true, .executes = true, .bf16 = true, .gpu = false, .kernel_trace = false,
    .checks_order = false, .comm = "local", .comm_launched = "mpi", .comms = "local mpi"};
static const fb_device_caps opaque_caps = {
    .host_access = false, .executes = true, .bf16 = true, .gpu = false, .kernel_trace = false,
    .checks_order = true, .comm = "local", .comm_launched = "mpi", .comms = "local mpi"};
static const fb_device_caps sim_caps = {
    .host_access = true, .executes = false, .bf16 = true, .gpu = false, .kernel_trace = false,
    .checks_order = false, .comm = "sim", .comm_launched = "sim", .comms = "sim"};
#ifdef FB_HAVE_CUDA
static const fb_device_caps cuda_caps = {
    .host_access = false, .executes = true, .bf16 = true, .gpu = true, .kernel_trace = true,
    .checks_order = false, .comm = "nccl", .comm_launched = "nccl", .comms = "nccl local mpi"};
/* The cuda backend lives in the CUDA module (cuda_module.h), loaded on first use: the driver
 * check comes first, so a machine without a GPU never loads it. */
static bool cuda_available(char *why, size_t n) {
  char reason[512];
  if (!fb_cuda_driver_present(why, n)) return false;
  const fb_cuda_module *m = fb_cuda_module_load(reason, sizeof reason);
  if (!m && why && n) snprintf(why, n, "cannot load the CUDA module: %s", reason);
  return m && m->present(why, n);
}
static int64_t cuda_capacity(int ranks_here) {
  const fb_cuda_module *m = fb_cuda_module_load(NULL, 0);
  return m ? m->capacity(ranks_here) : -1;
}
static int cuda_devices_here(void) {
  const fb_cuda_module *m = fb_cuda_driver_present(NULL, 0) ? fb_cuda_module_load(NULL, 0) : NULL;
  return m ? m->gpu_count() : 0;
}
static bool cuda_device_name(char *buf, size_t n) {
  const fb_cuda_module *m = fb_cuda_driver_present(NULL, 0) ? fb_cuda_module_load(NULL, 0) : NULL;
  if (n) buf[0] = '\0';
  return m && m->gpu_count() > 0 && m->gpu_name(0, buf, n);
}
static const fb_device_ops *cuda_ops(bool load) {
  const fb_cuda_module *m = load ? fb_cuda_module_load(NULL, 0) : fb_cuda_module_loaded();
  return m ? m->device_ops : NULL;
}
#endif

static const fb_device_entry registry[] = {
    {.name = "cpu", .help = "this CPU: real math in fp32 or bf16, host memory",
     .ops = &fb_cpu_device_ops, .caps = &cpu_caps, .capacity = host_capacity},
    {.name = "cpu-opaque",
     .help = "the cpu kernels behind memory the host cannot touch and a checked stream order "
             "(the GPU stand-in of the tests)",
     .ops = &fb_cpu_opaque_device_ops, .caps = &opaque_caps, .capacity = host_capacity},
#ifdef FB_HAVE_CUDA
    {.name = "cuda", .help = "NVIDIA GPUs: CUDA kernels, cuBLAS, NCCL",
     .resolve = cuda_ops, .caps = &cuda_caps, .available = cuda_available,
     .capacity = cuda_capacity, .devices_here = cuda_devices_here,
     .device_name = cuda_device_name},
#endif
    {.name = "sim", .help = "no data: every op priced by the cost model of a hardware profile",
     .ops = &fb_sim_device_ops, .caps = &sim_caps},
};
enum { NREG = sizeof registry / sizeof *registry };

const fb_device_entry *fb_device_entry_at(int i) {
  return i >= 0 && i < NREG ? &registry[i] : NULL;
}

const fb_device_entry *fb_device_entry_lookup(const char *name) {
  for (int i = 0; name && i < NREG; i++)
    if (!strcmp(registry[i].name, name)) return &registry[i];
  return NULL;
}

/* The entry's ops; a backend in a loadable module is loaded when `load` (NULL if it cannot be). */
static const fb_device_ops *entry_ops(const fb_device_entry *e, bool load) {
  return e->ops ? e->ops : e->resolve ? e->resolve(load) : NULL;
}

const fb_device_ops *fb_device_lookup(const char *name) {
  const fb_device_entry *e = fb_device_entry_lookup(name);
  return e ? entry_ops(e, true) : NULL;
}

/* A device built outside the registry (tests' fakes) executes nothing the host cannot see. */
static const fb_device_caps unregistered_caps = {.host_access = true, .executes = true};

const fb_device_caps *fb_device_caps_of(const fb_device *d) {
  for (int i = 0; i < NREG; i++) /* a device of a module's backend means it is loaded */
    if (entry_ops(&registry[i], false) == d->ops) return registry[i].caps;
  return &unregistered_caps;
}

static void set_why(char *why, size_t n, const char *msg) {
  if (why && n) snprintf(why, n, "%s", msg);
}

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

void fb_device_names(char *buf, size_t n) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < NREG && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", registry[i].name);
}

bool fb_device_available(const char *name, char *why, size_t why_len) {
  const fb_device_entry *e = fb_device_entry_lookup(name);
  if (!e) {
    char all[128];
    fb_device_names(all, sizeof all);
    if (name && !strcmp(name, "cuda"))
      set_why(why, why_len, "this build has no CUDA (configure with nvcc present or -DFSDPB_CUDA=ON)");
    else if (why && why_len)
      snprintf(why, why_len, "unknown device '%s' (allowed: %s)", name ? name : "", all);
    return false;
  }
  return !e->available || e->available(why, why_len);
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
  d->simulated = !fb_device_caps_of(d)->executes;
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

const char *fb_coll_name(fb_coll c) {
  static const char *const n[FB_NCOLL] = {
      [FB_COLL_ALL_GATHER] = "all_gather", [FB_COLL_REDUCE_SCATTER] = "reduce_scatter",
      [FB_COLL_ALL_REDUCE] = "all_reduce", [FB_COLL_BROADCAST] = "broadcast",
      [FB_COLL_REDUCE] = "reduce",         [FB_COLL_BARRIER] = "barrier"};
  return (c >= 0 && c < FB_NCOLL) ? n[c] : "?";
}

double fb_op_gemm_size(const fb_op_cost *c) {
  if (c->m > 0 && c->n > 0 && c->k > 0)
    return cbrt((double)c->m * (double)c->n * (double)c->k * (double)(c->batch > 0 ? c->batch : 1));
  return cbrt(c->flops / 2.0);
}

double fb_coll_bytes(fb_coll c, int64_t count, fb_dtype t, int world) {
  const double e = (double)count * (double)fb_dtype_size(t);
  switch (c) {
  case FB_COLL_ALL_GATHER:
  case FB_COLL_REDUCE_SCATTER: return e * world;
  case FB_COLL_ALL_REDUCE: return 2.0 * e;
  case FB_COLL_BROADCAST:
  case FB_COLL_REDUCE: return e;
  case FB_COLL_BARRIER:
  case FB_NCOLL: break;
  }
  return 0.0;
}

/* Bytes one rank puts on the wire, assuming ring algorithms (NCCL's default and the bus
 * bandwidth convention of nccl-tests):
 *  - all-gather / reduce-scatter: W-1 steps of one shard each = (W-1)/W of the full buffer
 *    (count*W*size), i.e. (W-1)*count*size;
 *  - all-reduce: a reduce-scatter then an all-gather of the whole tensor: 2(W-1)/W*count*size;
 *  - broadcast / reduce: a pipelined ring (chain) where every rank but one forwards the whole
 *    tensor; averaged over ranks that is (W-1)/W*count*size;
 *  - barrier: nothing measurable. World 1 sends nothing. */
double fb_coll_wire_bytes(fb_coll c, int64_t count, fb_dtype t, int world) {
  if (world <= 1) return 0.0;
  const double e = (double)count * (double)fb_dtype_size(t);
  const double f = (double)(world - 1) / (double)world;
  switch (c) {
  case FB_COLL_ALL_GATHER:
  case FB_COLL_REDUCE_SCATTER: return f * e * world;
  case FB_COLL_ALL_REDUCE: return 2.0 * f * e;
  case FB_COLL_BROADCAST:
  case FB_COLL_REDUCE: return f * e;
  case FB_COLL_BARRIER:
  case FB_NCOLL: break;
  }
  return 0.0;
}

fb_status fb_event_record(fb_device *d, fb_event *e, fb_stream *s) {
  if (d->rec) fb_recorder_event_record(d->rec, e, s);
  return d->ops->event_record(d, e, s);
}

fb_status fb_stream_wait(fb_device *d, fb_stream *s, fb_event *e) {
  if (d->rec) fb_recorder_stream_wait(d->rec, s, e);
  return d->ops->stream_wait(d, s, e);
}
