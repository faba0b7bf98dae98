/* CUPTI activity capture (see cupti.h). CUPTI hands over filled record buffers on its own
 * thread; each record is copied into a compact process-wide list (kernel names interned) under
 * a mutex, so nothing refers to CUPTI's buffers after they are returned. The list never grows
 * past the max_records given to start: later records are counted, not kept. Device records of
 * GPUs other than the traced rank's are skipped. Runtime/driver API records are written only
 * when a kept kernel, memcpy or memset shares their correlation id (the launches), on the
 * host process's track of their thread (host time, not the GPU's).
 * It does not decide which steps are traced (the runner brackets them with start/stop). */
#include "cupti.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <cupti.h>

#include "../cpu/device_cpu.h"
#include "../../core/json_out.h"

#define BUF_BYTES ((size_t)8 << 20)
#define BUF_ALIGN 8

typedef enum rec_kind { REC_KERNEL = 0, REC_MEMCPY, REC_MEMSET, REC_API } rec_kind;

typedef struct rec {
  rec_kind kind;
  uint64_t start, end;     /* CLOCK_MONOTONIC ns (our timestamp source) */
  uint32_t stream, device, corr, thread;
  uint64_t bytes;
  const char *name;        /* interned (kernels) or static */
} rec;

#define DEFAULT_MAX_RECORDS ((size_t)1000000)

static struct {
  pthread_mutex_t mu;
  bool enabled;
  bool registered;         /* callbacks and timestamp source given to CUPTI (once) */
  int rank;                /* rank given to start, -1 = none since the last clear */
  int device;              /* CUDA device of that rank, -1 = keep every device */
  size_t max;              /* records kept at most */
  rec *v;
  size_t n, cap;
  char **names;            /* interned kernel names */
  size_t nnames, capnames;
  size_t dropped;          /* over max, out of host memory, or dropped by CUPTI */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .rank = -1, .device = -1,
       .max = DEFAULT_MAX_RECORDS};

static uint64_t CUPTIAPI mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static fb_status cupti_err(const char *call, CUptiResult r) {
  const char *s = NULL;
  cuptiGetResultString(r, &s);
  return FB_ERR(FB_EDEVICE, "%s failed: %s", call, s ? s : "unknown CUPTI error");
}

/* Called with g.mu held. Linear search is fine: a run has a few hundred distinct kernels,
 * and the most recent names are checked first. */
static const char *intern(const char *s) {
  if (!s) return "?";
  for (size_t i = g.nnames; i-- > 0;)
    if (!strcmp(g.names[i], s)) return g.names[i];
  if (g.nnames == g.capnames) {
    size_t cap = g.capnames ? 2 * g.capnames : 256;
    char **p = realloc(g.names, cap * sizeof *p);
    if (!p) return "?";
    g.names = p;
    g.capnames = cap;
  }
  char *d = strdup(s);
  if (!d) return "?";
  g.names[g.nnames++] = d;
  return d;
}

/* Called with g.mu held. Keeps at most g.max records; the rest are counted. */
static void push(const rec *r) {
  if (g.n >= g.max) {
    g.dropped++;
    return;
  }
  if (g.n == g.cap) {
    size_t cap = g.cap ? 2 * g.cap : 65536;
    if (cap > g.max) cap = g.max;
    rec *p = realloc(g.v, cap * sizeof *p);
    if (!p) {
      g.dropped++;
      return;
    }
    g.v = p;
    g.cap = cap;
  }
  g.v[g.n++] = *r;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  void *p = NULL;
  if (posix_memalign(&p, BUF_ALIGN, BUF_BYTES) != 0) p = NULL;
  *buffer = p;
  *size = p ? BUF_BYTES : 0;
  *max_records = 0;
}

static const char *memcpy_name(uint8_t kind) {
  switch (kind) {
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
  case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
  default: return "memcpy";
  }
}

/* Called with g.mu held: a device record of another rank's GPU (ranks as threads). CUPTI's
 * deviceId is the CUDA device ordinal of the process, the one cudaGetDevice returns. */
static bool other_device(uint32_t device) {
  return g.device >= 0 && device != (uint32_t)g.device;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid) {
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *a = NULL;
  pthread_mutex_lock(&g.mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
    rec r;
    memset(&r, 0, sizeof r);
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
      if (other_device(k->deviceId)) break;
      r = (rec){.kind = REC_KERNEL, .start = k->start, .end = k->end, .stream = k->streamId,
                .device = k->deviceId, .corr = k->correlationId, .name = intern(k->name)};
      push(&r);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)a;
      if (other_device(m->deviceId)) break;
      r = (rec){.kind = REC_MEMCPY, .start = m->start, .end = m->end, .stream = m->streamId,
                .device = m->deviceId, .corr = m->correlationId, .bytes = m->bytes,
                .name = memcpy_name(m->copyKind)};
      push(&r);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
      if (other_device(m->deviceId)) break;
      r = (rec){.kind = REC_MEMSET, .start = m->start, .end = m->end, .stream = m->streamId,
                .device = m->deviceId, .corr = m->correlationId, .bytes = m->bytes,
                .name = "memset"};
      push(&r);
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: { /* NCCL launches its kernels through the driver API */
      const CUpti_ActivityAPI *api = (const CUpti_ActivityAPI *)a;
      const char *nm = NULL;
      CUpti_CallbackDomain dom = a->kind == CUPTI_ACTIVITY_KIND_RUNTIME
                                     ? CUPTI_CB_DOMAIN_RUNTIME_API
                                     : CUPTI_CB_DOMAIN_DRIVER_API;
      if (cuptiGetCallbackName(dom, api->cbid, &nm) != CUPTI_SUCCESS) nm = NULL;
      r = (rec){.kind = REC_API, .start = api->start, .end = api->end, .thread = api->threadId,
                .corr = api->correlationId, .name = intern(nm ? nm : "cuda api call")};
      push(&r);
      break;
    }
    default:
      break;
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
    g.dropped += dropped;
  pthread_mutex_unlock(&g.mu);
  free(buffer);
}

static const CUpti_ActivityKind kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER};

fb_status fb_cupti_start(int rank, size_t max_records) {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    dev = -1; /* no current device: keep every device's records */
  }
  pthread_mutex_lock(&g.mu);
  if (g.enabled) {
    int was = g.rank;
    pthread_mutex_unlock(&g.mu);
    if (was == rank) return FB_OK;
    return FB_ERR(FB_EUSAGE, "rank %d: CUPTI is already collecting for rank %d (one rank of a "
                  "process is traced)", rank, was);
  }
  bool registered = g.registered;
  pthread_mutex_unlock(&g.mu);
  CUptiResult r;
  if (!registered) {
    r = cuptiActivityRegisterTimestampCallback(mono_ns);
    if (r != CUPTI_SUCCESS) return cupti_err("cuptiActivityRegisterTimestampCallback", r);
    r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) return cupti_err("cuptiActivityRegisterCallbacks", r);
  }
  pthread_mutex_lock(&g.mu);
  g.registered = true;
  g.rank = rank;
  g.device = dev;
  g.max = max_records ? max_records : DEFAULT_MAX_RECORDS;
  pthread_mutex_unlock(&g.mu);
  size_t i = 0;
  for (; i < sizeof kinds / sizeof kinds[0]; i++) {
    r = cuptiActivityEnable(kinds[i]);
    if (r != CUPTI_SUCCESS) {
      while (i-- > 0) cuptiActivityDisable(kinds[i]);
      return cupti_err("cuptiActivityEnable", r);
    }
  }
  pthread_mutex_lock(&g.mu);
  g.enabled = true;
  pthread_mutex_unlock(&g.mu);
  return FB_OK;
}

size_t fb_cupti_dropped(void) {
  pthread_mutex_lock(&g.mu);
  size_t d = g.dropped;
  pthread_mutex_unlock(&g.mu);
  return d;
}

int fb_cupti_rank(void) {
  pthread_mutex_lock(&g.mu);
  int r = g.rank;
  pthread_mutex_unlock(&g.mu);
  return r;
}

fb_status fb_cupti_stop(void) {
  pthread_mutex_lock(&g.mu);
  bool on = g.enabled;
  g.enabled = false;
  pthread_mutex_unlock(&g.mu);
  if (!on) return FB_OK;
  /* flush first (delivers records through buffer_completed, which takes the mutex) */
  CUptiResult r = cuptiActivityFlushAll(1);
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) cuptiActivityDisable(kinds[i]);
  if (r != CUPTI_SUCCESS) return cupti_err("cuptiActivityFlushAll", r);
  return FB_OK;
}

void fb_cupti_clear(void) {
  pthread_mutex_lock(&g.mu);
  free(g.v);
  g.v = NULL;
  g.n = g.cap = 0;
  for (size_t i = 0; i < g.nnames; i++) free(g.names[i]);
  free(g.names);
  g.names = NULL;
  g.nnames = g.capnames = 0;
  g.dropped = 0;
  if (!g.enabled) {
    g.rank = -1;
    g.device = -1;
  }
  pthread_mutex_unlock(&g.mu);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

static bool has_u32(const uint32_t *v, size_t n, uint32_t x) {
  return bsearch(&x, v, n, sizeof *v, cmp_u32) != NULL;
}

#define TID_STREAM 100000  /* tid of "cuda stream N" = TID_STREAM + N */
#define TID_API 200000     /* tid of "cuda api (thread T)" = TID_API + T % 100000 */

static void sep(FILE *f, bool *first) {
  fputs(*first ? "\n" : ",\n", f);
  *first = false;
}

static void put_ts(FILE *f, double us) { fprintf(f, "%.3f", us); }

/* Programmatic dependent launch (Hopper) lets a kernel start while the previous kernel of its
 * stream drains, so two slices of one stream's track can overlap in part, which a trace viewer
 * cannot nest. shift[i] (ns) moves such a record's start to the end of the records before it
 * on its stream; the record keeps the overlap as args.launch_overlap_us. A record that lies
 * wholly inside an earlier one stays as it is (it nests). shift: g.n entries, zeroed. */
typedef struct ord {
  uint32_t stream;
  uint64_t start;
  size_t i;
} ord;

static int cmp_ord(const void *a, const void *b) {
  const ord *x = a, *y = b;
  if (x->stream != y->stream) return (x->stream > y->stream) - (x->stream < y->stream);
  if (x->start != y->start) return (x->start > y->start) - (x->start < y->start);
  return (x->i > y->i) - (x->i < y->i);
}

static fb_status stream_overlaps(uint64_t *shift) {
  ord *o = malloc((g.n ? g.n : 1) * sizeof *o);
  if (!o) return FB_ERR(FB_ENOMEM, "trace: out of host memory (%zu CUPTI records)", g.n);
  size_t k = 0;
  for (size_t i = 0; i < g.n; i++)
    if (g.v[i].kind != REC_API)
      o[k++] = (ord){.stream = g.v[i].stream, .start = g.v[i].start, .i = i};
  qsort(o, k, sizeof *o, cmp_ord);
  uint64_t end = 0;
  for (size_t j = 0; j < k; j++) {
    const rec *r = &g.v[o[j].i];
    if (j == 0 || o[j].stream != o[j - 1].stream) end = 0;
    if (r->start < end && r->end > end) shift[o[j].i] = end - r->start;
    if (r->end > end) end = r->end;
  }
  free(o);
  return FB_OK;
}

/* Tracks sort by tid: the API threads' tracks (TID_API + ...) after the streams' ones. */
static void sort_index(FILE *f, bool *first, int pid, unsigned tid) {
  sep(f, first);
  fprintf(f, "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,"
          "\"args\":{\"sort_index\":%u}}", pid, tid, tid);
}

/* Flow ids in the trace's scheme for one process (chrome_trace.c's wait arrows use
 * pid * 1e9 + op index): the launch arrows of pid use pid * 1e9 + correlation id. */
static long long flow_id(int pid, uint32_t corr) { return (long long)pid * 1000000000LL + corr; }

fb_status fb_cupti_write_events(FILE *f, int pid, int host_pid, double epoch_offset_us,
                                bool *first) {
  /* mono ns -> fb_cpu_clock seconds: the clock's epoch on CLOCK_MONOTONIC */
  const double epoch_mono_s = (double)mono_ns() * 1e-9 - fb_cpu_clock();
  pthread_mutex_lock(&g.mu);
  fb_status st = FB_OK;
  /* correlation ids of device activity, to keep only the launching API calls */
  uint32_t *corr = malloc((g.n ? g.n : 1) * sizeof *corr);
  uint32_t *streams = malloc((g.n ? g.n : 1) * sizeof *streams);
  uint32_t *threads = malloc((g.n ? g.n : 1) * sizeof *threads);
  uint32_t *api = malloc((g.n ? g.n : 1) * sizeof *api); /* correlation ids of kept calls */
  uint64_t *shift = calloc(g.n ? g.n : 1, sizeof *shift);
  if (!corr || !streams || !threads || !api || !shift) {
    st = FB_ERR(FB_ENOMEM, "trace: out of host memory (%zu CUPTI records)", g.n);
    goto out;
  }
  if ((st = stream_overlaps(shift)) != FB_OK) goto out;
  size_t nc = 0, ns = 0, nt = 0, na = 0;
  for (size_t i = 0; i < g.n; i++) {
    if (g.v[i].kind != REC_API) {
      corr[nc++] = g.v[i].corr;
      streams[ns++] = g.v[i].stream;
    }
  }
  qsort(corr, nc, sizeof *corr, cmp_u32);
  qsort(streams, ns, sizeof *streams, cmp_u32);
  for (size_t i = 0; i < g.n; i++)
    if (g.v[i].kind == REC_API && has_u32(corr, nc, g.v[i].corr)) {
      threads[nt++] = g.v[i].thread;
      api[na++] = g.v[i].corr;
    }
  qsort(threads, nt, sizeof *threads, cmp_u32);
  qsort(api, na, sizeof *api, cmp_u32);
  /* track names */
  for (size_t i = 0; i < ns; i++) {
    if (i > 0 && streams[i] == streams[i - 1]) continue;
    char nm[64];
    snprintf(nm, sizeof nm, "cuda stream %u", streams[i]);
    sep(f, first);
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"args\":{\"name\":",
            pid, TID_STREAM + streams[i]);
    fb_json_str(f, nm);
    fputs("}}", f);
    sort_index(f, first, pid, TID_STREAM + streams[i]);
  }
  for (size_t i = 0; i < nt; i++) {
    if (i > 0 && threads[i] == threads[i - 1]) continue;
    char nm[64];
    snprintf(nm, sizeof nm, "cuda api (thread %u)", threads[i]);
    sep(f, first);
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"args\":{\"name\":",
            host_pid, TID_API + threads[i] % 100000);
    fb_json_str(f, nm);
    fputs("}}", f);
    sort_index(f, first, host_pid, TID_API + threads[i] % 100000);
  }
  static const char *const cat[] = {[REC_KERNEL] = "cuda kernel", [REC_MEMCPY] = "cuda memcpy",
                                    [REC_MEMSET] = "cuda memset", [REC_API] = "cuda api"};
  for (size_t i = 0; i < g.n; i++) {
    const rec *r = &g.v[i];
    if (r->kind == REC_API && !has_u32(corr, nc, r->corr)) continue;
    double t0 = ((double)(r->start + shift[i]) * 1e-9 - epoch_mono_s) * 1e6 + epoch_offset_us;
    double t1 = ((double)r->end * 1e-9 - epoch_mono_s) * 1e6 + epoch_offset_us;
    if (t1 < 0) continue;
    if (t1 < t0) t1 = t0;
    unsigned tid = r->kind == REC_API ? TID_API + r->thread % 100000 : TID_STREAM + r->stream;
    const int rpid = r->kind == REC_API ? host_pid : pid;
    sep(f, first);
    fputs("{\"name\":", f);
    fb_json_str(f, r->name);
    fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":", cat[r->kind], rpid,
            tid);
    put_ts(f, t0);
    fputs(",\"dur\":", f);
    put_ts(f, t1 - t0);
    fprintf(f, ",\"args\":{\"rank\":%d,\"correlation\":%u", g.rank, r->corr);
    if (r->kind != REC_API) fprintf(f, ",\"device\":%u,\"stream\":%u", r->device, r->stream);
    if (r->bytes) fprintf(f, ",\"bytes\":%llu", (unsigned long long)r->bytes);
    if (shift[i]) fprintf(f, ",\"launch_overlap_us\":%.3f", (double)shift[i] * 1e-3);
    fputs("}}", f);
    /* flow: starts inside the launching API call, ends at the device activity (only when
     * both ends were captured) */
    if (r->kind != REC_API && !has_u32(api, na, r->corr)) continue;
    sep(f, first);
    fprintf(f, "{\"name\":\"launch\",\"cat\":\"cuda flow\",\"ph\":\"%s\",\"id\":%lld,\"pid\":%d,"
            "\"tid\":%u,\"ts\":", r->kind == REC_API ? "s" : "f", flow_id(pid, r->corr), rpid,
            tid);
    put_ts(f, r->kind == REC_API ? 0.5 * (t0 + t1) : t0);
    fputs(r->kind == REC_API ? "}" : ",\"bp\":\"e\"}", f);
  }
  if (g.dropped)
    fprintf(stderr, "fsdpbench: warning: rank %d: %zu CUPTI activity records were not kept "
            "(over the limit of %zu, or dropped by CUPTI): the GPU trace is incomplete\n",
            g.rank, g.dropped, g.max);
out:
  free(corr);
  free(streams);
  free(threads);
  free(api);
  free(shift);
  pthread_mutex_unlock(&g.mu);
  return st;
}

/* Kineto's names for copies and sets ("Memcpy DtoH (Device -> Pageable)" in PyTorch's traces;
 * HTA matches the leading "Memcpy" / "Memset"). */
static const char *kineto_name(const rec *r) {
  if (r->kind == REC_MEMSET) return "Memset (Device)";
  if (r->kind != REC_MEMCPY) return r->name;
  if (!strcmp(r->name, "memcpy HtoD")) return "Memcpy HtoD (Host -> Device)";
  if (!strcmp(r->name, "memcpy DtoH")) return "Memcpy DtoH (Device -> Host)";
  if (!strcmp(r->name, "memcpy DtoD")) return "Memcpy DtoD (Device -> Device)";
  if (!strcmp(r->name, "memcpy PtoP")) return "Memcpy PtoP (Device -> Device)";
  return "Memcpy";
}

static long long round_us(double us) { return llround(us); }

fb_status fb_cupti_write_kineto(FILE *f, int device_pid, int host_pid, double epoch_offset_us,
                                bool *first) {
  const double epoch_mono_s = (double)mono_ns() * 1e-9 - fb_cpu_clock();
  static const char *const cat[] = {[REC_KERNEL] = "kernel", [REC_MEMCPY] = "gpu_memcpy",
                                    [REC_MEMSET] = "gpu_memset", [REC_API] = "cuda_runtime"};
  pthread_mutex_lock(&g.mu);
  for (size_t i = 0; i < g.n; i++) {
    const rec *r = &g.v[i];
    const long long t0 = round_us(((double)r->start * 1e-9 - epoch_mono_s) * 1e6 + epoch_offset_us);
    long long t1 = round_us(((double)r->end * 1e-9 - epoch_mono_s) * 1e6 + epoch_offset_us);
    if (t1 < 0) continue;
    if (t1 < t0) t1 = t0;
    const bool dev = r->kind != REC_API;
    sep(f, first);
    fprintf(f, "{\"ph\":\"X\",\"cat\":\"%s\",\"name\":", cat[r->kind]);
    fb_json_str(f, kineto_name(r));
    fprintf(f, ",\"pid\":%d,\"tid\":%u,\"ts\":%lld,\"dur\":%lld,\"args\":{\"correlation\":%u",
            dev ? device_pid : host_pid, dev ? r->stream : 1u, t0, t1 - t0, r->corr);
    if (dev) fprintf(f, ",\"device\":%u,\"stream\":%u", r->device, r->stream);
    if (r->bytes) fprintf(f, ",\"bytes\":%llu", (unsigned long long)r->bytes);
    fputs("}}", f);
  }
  pthread_mutex_unlock(&g.mu);
  return FB_OK;
}
