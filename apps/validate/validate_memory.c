/* `validate --dataset` on training-run files: the peak memory a source printed beside the
 * simulator's (see validate_rows.h, ds_published_mem). A source prints one figure in its own
 * unit ("8284.7 MB", "62.4 GB") of one metric (PyTorch's max allocated or max reserved); which
 * unit and which metric is a fact of the source's code, restated in the table below with where
 * it is read; a source not in the table is not compared, saying so. The prediction is rank 0's
 * peak of the executed buffers (the sim device's ledger: what torch.cuda.max_memory_allocated
 * counts), split into what was allocated before the first step (sharded state and the
 * executor's buffers) and what the step adds. Nothing here is fitted; it runs nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "median.h"
#include "validate_rows.h"

#define GIB 1073741824.0

typedef struct mem_convention {
  const char *source; /* source_id */
  const char *unit;   /* the unit word as the source prints it */
  double bytes;       /* what one of that unit is in the source's code */
  bool reserved;      /* the figure is max reserved (else max allocated) */
  const char *what;   /* the metric and where the source's code takes it */
} mem_convention;

static const mem_convention conventions[] = {
    {.source = "zeropp-tutorial", .unit = "MB", .bytes = 1048576.0,
     .what = "max allocated on rank 0, Megatron-DeepSpeed's report_memory: "
             "torch.cuda.max_memory_allocated() / 2^20"},
    {.source = "atorch-llama2", .unit = "MB", .bytes = 1048576.0,
     .what = "the README's 'Mem Max allocated(MB)': torch.cuda.max_memory_allocated() / 2^20"},
    {.source = "kempnerforge-mfu", .unit = "GB", .bytes = GIB,
     .what = "the report's 'Mem/GPU', the step log's peak (kempnerforge/metrics/memory.py: "
             "torch.cuda.max_memory_allocated() / 2^30)"},
};

static const mem_convention *convention(const char *source) {
  for (size_t i = 0; i < sizeof conventions / sizeof conventions[0]; i++)
    if (!strcmp(conventions[i].source, source)) return &conventions[i];
  return NULL;
}

bool ds_published_mem(const ds_ctx *x, int r, ds_result *o) {
  const char *text = ds_col(x, r, "peak_mem_gb");
  o->mem_pub = 0;
  o->mem_how[0] = 0;
  char *end;
  const double v = strtod(text, &end);
  if (!*text) return false;
  while (*end == ' ') end++;
  const mem_convention *c = convention(o->source);
  const char *why = end == text || !(v > 0) || !isfinite(v) ? "not a positive number and a unit"
                    : !c ? "this validator does not know whether the source's figure is "
                           "allocated or reserved memory, nor its unit"
                    : strcmp(end, c->unit) ? "not in the unit this source prints" : NULL;
  if (why) {
    snprintf(o->mem_how, sizeof o->mem_how, "%s, not compared: %s", text, why);
    return false;
  }
  o->mem_pub = v * c->bytes;
  o->mem_reserved_metric = c->reserved;
  snprintf(o->mem_how, sizeof o->mem_how, "%s", c->what);
  return true;
}

bool ds_mem_figures(const ds_result *o, double *pub, double *pred, double *err) {
  if (o->skip[0] || !(o->mem_pub > 0)) return false;
  *pub = o->mem_pub / GIB;
  *pred = (o->mem_reserved_metric ? o->mem_reserved : o->mem_alloc) / GIB;
  *err = (*pred - *pub) / *pub * 100.0;
  return true;
}

void ds_print_mem_row(const ds_result *o) {
  double pub, pred, err;
  if (!o->mem_how[0]) return;
  if (!ds_mem_figures(o, &pub, &pred, &err)) {
    printf("#        row %d: peak memory published %s\n", o->row, o->mem_how);
    return;
  }
  printf("#        row %d: peak memory published %.2f GiB (%s), predicted %.2f GiB %s "
         "(%.2f GiB before the first step, %.2f GiB in the step; the caching allocator "
         "model reserves %.2f GiB on the fullest rank): %+.1f %%\n", o->row, pub, o->mem_how,
         pred, o->mem_reserved_metric ? "reserved" : "allocated", o->mem_state / GIB,
         (o->mem_alloc - o->mem_state) / GIB, o->mem_reserved / GIB, err);
  if (o->mem_fp32_state > 0 && !o->mem_reserved_metric)
    printf("#        row %d: %.2f GiB of that prediction is weights, gradients and AdamW moments "
           "held in fp32 beyond the 8 bytes a parameter this row keeps them in (bf16; the "
           "engine keeps fp32 masters and moments, 16): %+.1f %% without it\n", o->row,
           o->mem_fp32_state / GIB, (pred - o->mem_fp32_state / GIB - pub) / pub * 100.0);
}

void ds_print_mem_summary(const ds_ctx *x) {
  double *e = malloc(sizeof *e * (size_t)(x->n + 1));
  if (!e) return;
  int n = 0;
  double worst = 0;
  for (int i = 0; i < x->n; i++) {
    double pub, pred, err;
    if (!ds_mem_figures(&x->res[i], &pub, &pred, &err)) continue;
    e[n] = fabs(err);
    if (e[n] > worst) worst = e[n];
    n++;
  }
  if (n)
    printf("memory: %d rows, median |err| %.1f%%, worst %.1f%% (the published peak against the "
           "predicted one of the same metric, rank 0)\n", n, fb_median(e, n), worst);
  free(e);
}
