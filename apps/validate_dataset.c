/* `fsdpbench validate --dataset FILE` (see validate_dataset.h). One reader per kind of file;
 * each turns a row into either a (published, predicted) pair or a reason it cannot be
 * expressed. The GPU of a row picks its profile through one table (gpu_profiles). */
#include "validate_dataset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../engine/core/files.h"
#include "../engine/config/config.h"
#include "../engine/device/kernels.h"
#include "../engine/exec/runner.h"
#include "../strategies/strategy.h"
#include "../engine/sim/cost_model.h"
#include "csv_table.h"
#include "../engine/sim/hardware.h"
#include "report.h"

/* ---- results ------------------------------------------------------------------------------ */

typedef struct ds_result {
  int row;               /* 1-based data row of the file */
  char what[160];        /* configuration, one line */
  char gpu[16];          /* profile the row used */
  double published, predicted;
  char skip[160];        /* non-empty: not expressible, with this reason */
  long long ooms;        /* training rows: out-of-memory errors the allocator model predicts
                            (the published run had none) */
} ds_result;

typedef struct ds_ctx {
  const fb_csv *t;
  ds_result *res;
  int n;
  const char *unit;      /* "tok/s/GPU", "TFLOP/s", "GB/s busbw" */
  const char *closing;   /* "dev-set" or "op-set" */
  char tmpdir[64];
  bool verbose;
} ds_ctx;

static int fail(fb_status st) {
  fprintf(stderr, "fsdpbench validate: error: %s\n", fb_error_msg());
  return st == FB_EUSAGE ? 2 : 1;
}

/* Whether `s` contains `sub`, ignoring case. */
static bool ci_has(const char *s, const char *sub) {
  size_t n = strlen(sub);
  for (; *s; s++)
    if (!strncasecmp(s, sub, n)) return true;
  return false;
}

/* ---- GPU name -> profile ------------------------------------------------------------------- */

typedef struct gpu_rule {
  const char *has;       /* substring of the row's GPU name (case-insensitive) */
  const char *also;      /* second substring, or NULL */
  int mem_lo, mem_hi;    /* gpu_mem_gb range, 0 = any */
  const char *profile;   /* NULL: no profile, `why` says so */
  const char *why;
} gpu_rule;

/* First match wins. */
static const gpu_rule gpu_profiles[] = {
    {.has = "GH200", .why = "GH200 (Grace Hopper) has no profile"},
    {.has = "PCIe", .why = "PCIe cards have no profile (SXM only, and h100-nvl)"},
    {.has = "H200", .profile = "h200"},
    {.has = "H100 NVL", .profile = "h100-nvl"},
    {.has = "H100", .also = "HBM2e", .profile = "h100-96gb"},
    {.has = "H100", .mem_lo = 90, .mem_hi = 100, .profile = "h100-96gb"},
    {.has = "H100", .profile = "h100"},
    {.has = "A100", .also = "40GB", .profile = "a100-40gb"},
    {.has = "A100", .mem_lo = 40, .mem_hi = 40, .profile = "a100-40gb"},
    {.has = "A100", .profile = "a100"},
};

static const char *profile_for(const char *gpu, int mem_gb, const char **why) {
  for (size_t i = 0; i < sizeof gpu_profiles / sizeof gpu_profiles[0]; i++) {
    const gpu_rule *r = &gpu_profiles[i];
    if (!ci_has(gpu, r->has) || (r->also && !ci_has(gpu, r->also))) continue;
    if (r->mem_lo && (mem_gb < r->mem_lo || mem_gb > r->mem_hi)) continue;
    *why = r->why;
    return r->profile;
  }
  *why = "no profile for this GPU";
  return NULL;
}

static double num(const char *s) {
  char *e;
  if (!s || !*s) return NAN;
  double v = strtod(s, &e);
  return *e ? NAN : v;
}

static const char *col(const ds_ctx *x, int r, const char *name) {
  return fb_csv_get(x->t, r, fb_csv_col(x->t, name));
}

static void skip(ds_result *o, const char *fmt, const char *arg) {
  snprintf(o->skip, sizeof o->skip, fmt, arg);
}

/* ---- training runs ------------------------------------------------------------------------ */

/* Writes the row's model as a YAML file the runner loads like any in models/. */
static fb_status write_model(const ds_ctx *x, int r, const char *path, int seq, char *why,
                             size_t nwhy) {
  const char *name = col(x, r, "model");
  bool mpt = !strncasecmp(name, "MPT", 3), llama = !strncasecmp(name, "Llama", 5);
  if (!mpt && !llama) {
    snprintf(why, nwhy, "model family of '%s' not modelled (MPT and Llama are)", name);
    return FB_EUNSUPPORTED;
  }
  double L = num(col(x, r, "layers")), d = num(col(x, r, "d_model")),
         h = num(col(x, r, "heads")), kv = num(col(x, r, "kv_heads")), f = num(col(x, r, "ffn")),
         v = num(col(x, r, "vocab"));
  if (!(L > 0 && d > 0 && h > 0 && kv > 0 && f > 0 && v > 0)) {
    snprintf(why, nwhy, "model dimensions missing");
    return FB_EUNSUPPORTED;
  }
  FILE *fp = fopen(path, "w");
  if (!fp) return FB_ERR(FB_EIO, "validate: cannot write %s", path);
  /* MPT (llm-foundry): GPT-2 shaped, tied embeddings, learned positions; Llama: RoPE, untied */
  fprintf(fp, "name: %s\nfamily: %s\nvocab: %.0f\ndim: %.0f\nlayers: %.0f\nheads: %.0f\n"
              "kv_heads: %.0f\nffn: %.0f\nmax_seq: %d\nnorm_eps: 1e-5\n%stied: %s\n"
              "init_std: 0.02\n",
          name, mpt ? "gpt2" : "llama", v, d, L, h, kv, f, seq,
          llama ? (strstr(name, "Llama-2") ? "rope_theta: 10000\n" : "rope_theta: 500000\n") : "",
          mpt ? "true" : "false");
  return fclose(fp) ? FB_ERR(FB_EIO, "validate: cannot write %s", path) : FB_OK;
}

/* Sets one run option by name; a failure means the row asks for something the runner lacks. */
static bool set(fb_run_config *c, const char *key, const char *val, ds_result *o) {
  if (fb_config_set(c, key, val, "dataset: ") == FB_OK) return true;
  snprintf(o->skip, sizeof o->skip, "--%s %s: %s", key, val, fb_error_msg());
  return false;
}

/* Recompute mode of the row's activation_checkpointing text. */
static bool set_recompute(fb_run_config *c, const char *ac, int layers, ds_result *o) {
  if (!strcasecmp(ac, "none") || !*ac) return set(c, "recompute", "off", o);
  if (!strcasecmp(ac, "full")) return set(c, "recompute", "full", o);
  if (ci_has(ac, "op-level")) return set(c, "recompute", "op", o);
  if (ci_has(ac, "per-layer")) { /* torchtitan selective_ac_option "2": every 2nd block */
    char k[16];
    snprintf(k, sizeof k, "%d", layers / 2);
    return set(c, "recompute", "full", o) && set(c, "recompute-layers", k, o);
  }
  skip(o, "activation checkpointing '%s' not modelled", ac);
  return false;
}

/* Mixed precision of the row: bf16 compute always; gradient reduction in bf16 for Composer's
 * PURE preset (llm-foundry's "bf16" rows), fp32 for amp_bf16 / DEFAULT and torchtitan. */
static bool set_precision(fb_run_config *c, const char *prec, const char *src, ds_result *o) {
  if (ci_has(prec, "fp8") || ci_has(prec, "float8")) {
    skip(o, "precision '%s': FP8 matmuls are not modelled", prec);
    return false;
  }
  if (!ci_has(prec, "bf16")) {
    skip(o, "precision '%s' not modelled", prec);
    return false;
  }
  bool pure = !strcmp(prec, "bf16") && strstr(src, "llmfoundry");
  return set(c, "param-dtype", "bf16", o) && set(c, "reduce-dtype", pure ? "bf16" : "fp32", o);
}

static bool set_sharding(fb_run_config *c, const char *sh, ds_result *o) {
  if (!strncasecmp(sh, "NON-DP", 6)) {
    skip(o, "%s: tensor/pipeline/context parallel, not pure data parallel", sh);
    return false;
  }
  if (strstr(sh, "SHARD_GRAD_OP"))
    return set(c, "strategy", "fsdp", o) && set(c, "reshard-after-forward", "false", o);
  if (strstr(sh, "FULL_SHARD")) return set(c, "strategy", "fsdp", o);
  skip(o, "sharding '%s' not modelled", sh);
  return false;
}

static fb_status train_row(ds_ctx *x, int r, ds_result *o) {
  const char *src = col(x, r, "source_id"), *gpu = col(x, r, "gpu");
  double n = num(col(x, r, "n_gpus")), mem = num(col(x, r, "gpu_mem_gb")),
         seq = num(col(x, r, "seq_len")), mb = num(col(x, r, "micro_batch_per_gpu")),
         gb = num(col(x, r, "global_batch")), pub = num(col(x, r, "tokens_per_s_per_gpu")),
         L = num(col(x, r, "layers"));
  const char *why = NULL, *prof = profile_for(gpu, isnan(mem) ? 0 : (int)mem, &why);
  snprintf(o->what, sizeof o->what, "%-10s %-5s %3.0fGB x%-4.0f seq %-5.0f mb %-3.0f ac %-9.9s %s",
           col(x, r, "model"), strncmp(gpu, "A100", 4) ? "H100" : "A100", mem, n, seq, mb,
           col(x, r, "activation_checkpointing"), col(x, r, "precision"));
  o->published = pub;
  fb_run_config c;
  fb_config_defaults(&c);
  if (!set_sharding(&c, col(x, r, "sharding"), o) ||
      !set_precision(&c, col(x, r, "precision"), src, o))
    return FB_OK;
  if (!prof) return skip(o, "%s", why), FB_OK;
  snprintf(o->gpu, sizeof o->gpu, "%s", prof);
  if (!(n >= 1 && seq >= 1 && mb >= 1 && gb >= 1 && pub > 0))
    return skip(o, "%s", "world, sequence, batch or throughput missing"), FB_OK;
  if (fmod(gb, n * mb) != 0)
    return skip(o, "%s", "global batch is not a multiple of micro-batch x GPUs"), FB_OK;
  char path[96], buf[32];
  snprintf(path, sizeof path, "%s/model.yaml", x->tmpdir);
  fb_status st = write_model(x, r, path, (int)seq, o->skip, sizeof o->skip);
  if (st == FB_EUNSUPPORTED) return FB_OK;
  FB_TRY(st);
  if (!set_recompute(&c, col(x, r, "activation_checkpointing"), (int)L, o)) return FB_OK;
  /* llm-foundry's benchmarks run attn_impl=triton by default (SOURCES.md): its Triton
   * FlashAttention is priced by the profile's `triton` attention kernel */
  char hwpath[128];
  snprintf(hwpath, sizeof hwpath, "%s", prof);
  if (strstr(src, "llmfoundry")) {
    snprintf(hwpath, sizeof hwpath, "%s/hw-triton.yaml", x->tmpdir);
    FILE *fp = fopen(hwpath, "w");
    if (!fp || fprintf(fp, "extends: %s\nattention_kernel: triton\n", prof) < 0 || fclose(fp))
      return FB_ERR(FB_EIO, "validate: cannot write %s", hwpath);
  }
  const char *kv[][2] = {{"model", path}, {"backend", "sim"}, {"comm", "sim"},
                         {"hardware", hwpath}, {"steps", "2"}, {"quiet", "true"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    if (!set(&c, kv[i][0], kv[i][1], o)) return FB_OK;
  const struct { const char *k; double v; } iv[] = {
      {"world", n}, {"seq", seq}, {"micro-batch", mb}, {"batch", gb}};
  for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++) {
    snprintf(buf, sizeof buf, "%.0f", iv[i].v);
    if (!set(&c, iv[i].k, buf, o)) return FB_OK;
  }
  if (fb_run_config_finalize(&c) != FB_OK) {
    snprintf(o->skip, sizeof o->skip, "configuration refused: %s", fb_error_msg());
    return FB_OK;
  }
  fb_run_result res;
  if ((st = fb_run(&c, &res)) != FB_OK) return st;
  double wall = res.ranks[0].steps[res.nsteps - 1].wall;
  o->predicted = (double)res.tokens_per_step / wall / res.world;
  o->ooms = (long long)fb_report_ooms(&res, NULL);
  fb_run_result_free(&res);
  return FB_OK;
}

/* ---- microbenchmarks: GEMM, attention, collectives ---------------------------------------- */

static fb_status load_profile(const char *gpu, double mem, ds_result *o, fb_hardware *hw) {
  const char *why = NULL, *prof = profile_for(gpu, isnan(mem) ? 0 : (int)mem, &why);
  if (!prof) return skip(o, "%s", why), FB_EUNSUPPORTED;
  snprintf(o->gpu, sizeof o->gpu, "%s", prof);
  return fb_hardware_load(prof, hw);
}

static fb_status gemm_row(ds_ctx *x, int r, ds_result *o) {
  const char *dt = col(x, r, "dtype");
  double m = num(col(x, r, "m")), n = num(col(x, r, "n")), k = num(col(x, r, "k")),
         b = num(col(x, r, "batch"));
  if (isnan(b)) b = 1;
  o->published = num(col(x, r, "tflops"));
  snprintf(o->what, sizeof o->what, "%-10.10s %-6.6s %5.0f x %6.0f x %6.0f x %-2.0f %s",
           col(x, r, "gpu"), dt, m, n, k, b, col(x, r, "shape_kind"));
  fb_hardware hw;
  fb_status st = load_profile(col(x, r, "gpu"), NAN, o, &hw);
  if (st != FB_OK) return st == FB_EUNSUPPORTED ? FB_OK : st;
  fb_dtype t = FB_BF16;
  if (strstr(dt, "fp8")) return skip(o, "%s: FP8 matmuls are not modelled", dt), FB_OK;
  if (!strncmp(dt, "f32", 3)) {
    t = FB_F32;
    hw.tf32 = true; /* XLA's default-precision f32 dot runs on TF32 tensor cores */
  }
  if (!(m > 0 && n > 0 && k > 0 && o->published > 0))
    return skip(o, "%s", "shape or throughput missing"), FB_OK;
  hw.sustained = 0; /* a microbenchmark: no sustained-load factor */
  fb_op_cost c = fb_op_gemm_cost("matmul", t, m, n, k, b, 0);
  o->predicted = c.flops / fb_cost_seconds(&hw, &c, 1) * 1e-12;
  return FB_OK;
}

static fb_status attention_row(ds_ctx *x, int r, ds_result *o) {
  const char *impl = col(x, r, "impl"), *pass = col(x, r, "pass");
  double T = num(col(x, r, "seq_len")), hd = num(col(x, r, "head_dim")),
         B = num(col(x, r, "batch")), H = num(col(x, r, "heads"));
  bool causal = !strcasecmp(col(x, r, "causal"), "true");
  o->published = num(col(x, r, "tflops"));
  snprintf(o->what, sizeof o->what, "%-14.14s %-17.17s %-7s %-6s seq %-5.0f hd %-3.0f",
           col(x, r, "gpu"), impl, pass, causal ? "causal" : "full", T, hd);
  bool fa1 = !strcmp(impl, "FlashAttention-1");
  if (!fa1 && strcmp(impl, "FlashAttention-2"))
    return skip(o, "%s: the profiles model FlashAttention-2 and -1", impl), FB_OK;
  if (!(o->published > 0)) return skip(o, "%s", "no figure (the source printed OOM)"), FB_OK;
  fb_hardware hw;
  fb_status st = load_profile(col(x, r, "gpu"), NAN, o, &hw);
  if (st != FB_OK) return st == FB_EUNSUPPORTED ? FB_OK : st;
  hw.attention_kernel = fa1;
  hw.sustained = 0; /* a microbenchmark: no sustained-load factor */
  bool bwd = !strcmp(pass, "fwd+bwd");
  if (!bwd && strcmp(pass, "fwd")) return skip(o, "pass '%s' not modelled", pass), FB_OK;
  fb_op_cost f = fb_op_attention_cost("attention_fwd", FB_BF16, (int)B, (int)T, (int)H, (int)H,
                                      (int)hd, 2, causal);
  fb_op_cost g = fb_op_attention_cost("attention_bwd", FB_BF16, (int)B, (int)T, (int)H, (int)H,
                                      (int)hd, 5, causal);
  double secs = fb_cost_seconds(&hw, &f, 1) + (bwd ? fb_cost_seconds(&hw, &g, 1) : 0);
  /* the benchmark's FLOP convention: fwd 4*b*s^2*h*d (halved when causal), fwd+bwd 3.5x */
  double flops = 4.0 * B * T * T * H * hd * (causal ? 0.5 : 1.0) * (bwd ? 3.5 : 1.0);
  o->predicted = flops / secs * 1e-12;
  return FB_OK;
}

static fb_status collective_row(ds_ctx *x, int r, ds_result *o) {
  const char *coll = col(x, r, "collective");
  double n = num(col(x, r, "n_gpus")), nodes = num(col(x, r, "n_nodes")),
         bytes = num(col(x, r, "bytes"));
  o->published = num(col(x, r, "busbw_gbs"));
  snprintf(o->what, sizeof o->what, "%-16.16s %-10.10s %3.0f GPUs %2.0f nodes %12.0f B",
           col(x, r, "gpu"), coll, n, nodes, bytes);
  if (strcmp(coll, "all_reduce")) return skip(o, "collective '%s' not compared", coll), FB_OK;
  if (!(n >= 2 && nodes >= 1 && bytes > 0 && o->published > 0))
    return skip(o, "%s", "an anchor without message size, rank count or single busbw"), FB_OK;
  fb_hardware hw;
  fb_status st = load_profile(col(x, r, "gpu"), NAN, o, &hw);
  if (st != FB_OK) return st == FB_EUNSUPPORTED ? FB_OK : st;
  hw.devices_per_node = (int)(n / nodes);
  double secs = fb_cost_collective(&hw, FB_COLL_ALL_REDUCE, bytes, (int)n);
  o->predicted = bytes / secs * 2.0 * (n - 1) / n * 1e-9;
  return FB_OK;
}

/* ---- driver ------------------------------------------------------------------------------- */

typedef fb_status (*row_fn)(ds_ctx *x, int r, ds_result *o);

typedef struct ds_kind {
  const char *key_column; /* a column only this kind of file has */
  const char *what, *unit, *closing;
  row_fn row;
} ds_kind;

static const ds_kind kinds[] = {
    {.key_column = "tokens_per_s_per_gpu", .what = "training runs", .unit = "tok/s/GPU",
     .closing = "dev-set", .row = train_row},
    {.key_column = "shape_kind", .what = "GEMM throughput", .unit = "TFLOP/s",
     .closing = "op-set", .row = gemm_row},
    {.key_column = "head_dim", .what = "attention throughput", .unit = "TFLOP/s",
     .closing = "op-set", .row = attention_row},
    {.key_column = "busbw_gbs", .what = "collective bus bandwidth", .unit = "GB/s",
     .closing = "op-set", .row = collective_row},
};

static double err_pct(const ds_result *o) {
  return (o->predicted - o->published) / o->published * 100.0;
}

static int by_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void print_rows(const ds_ctx *x) {
  printf("#  row  %-78s %-10s %12s %12s %8s\n", "configuration", "profile", "published",
         "predicted", "err %");
  printf("#  %*s %12s %12s\n", 89, "", x->unit, x->unit);
  for (int i = 0; i < x->n; i++) {
    const ds_result *o = &x->res[i];
    if (o->skip[0]) continue;
    printf("%6d  %-78s %-10s %12.1f %12.1f %+8.1f", o->row, o->what, o->gpu, o->published,
           o->predicted, err_pct(o));
    if (o->ooms > 0) printf("  model: %lld OOM", o->ooms);
    putchar('\n');
  }
  int noom = 0;
  for (int i = 0; i < x->n; i++) noom += !x->res[i].skip[0] && x->res[i].ooms > 0;
  if (noom)
    printf("# %d row(s) where the caching-allocator model predicts out-of-memory errors that the "
           "published run did not have (its memory model is too pessimistic there)\n", noom);
  int ns = 0;
  for (int i = 0; i < x->n; i++) ns += x->res[i].skip[0] != 0;
  if (ns) printf("# not expressible (%d rows):\n", ns);
  for (int i = 0; i < x->n; i++)
    if (x->res[i].skip[0])
      printf("#%5d  %-78s %s\n", x->res[i].row, x->res[i].what, x->res[i].skip);
}

/* The closing line, per profile lines first. */
static void print_summary(const ds_ctx *x) {
  double *e = malloc(sizeof *e * (size_t)(x->n + 1));
  if (!e) return;
  const char *profs[16];
  int np = 0;
  for (int i = 0; i < x->n; i++) {
    const ds_result *o = &x->res[i];
    if (o->skip[0]) continue;
    int j = 0;
    while (j < np && strcmp(profs[j], o->gpu)) j++;
    if (j == np && np < 16) profs[np++] = o->gpu;
  }
  for (int q = 0; q <= np; q++) { /* each profile, then the whole file (the closing line) */
    int p = q < np ? q : -1, n = 0, within = 0;
    for (int i = 0; i < x->n; i++) {
      const ds_result *o = &x->res[i];
      if (o->skip[0] || (p >= 0 && strcmp(o->gpu, profs[p]))) continue;
      e[n] = fabs(err_pct(o));
      within += e[n] <= 15.0;
      n++;
    }
    qsort(e, (size_t)n, sizeof *e, by_double);
    double med = n ? (n % 2 ? e[n / 2] : 0.5 * (e[n / 2 - 1] + e[n / 2])) : NAN;
    if (p >= 0)
      printf("#   %-10s %4d rows, median |err| %.1f%%, worst %.1f%%, within 15%%: %d/%d\n",
             profs[p], n, med, n ? e[n - 1] : NAN, within, n);
    else
      printf("%s: %d rows, median |err| %.1f%%, worst %.1f%%, within 15%%: %d/%d\n", x->closing,
             n, med, n ? e[n - 1] : NAN, within, n);
  }
  free(e);
}

static fb_status write_csv(const ds_ctx *x, const char *dir) {
  char path[600];
  if (mkdir(dir, 0777) && access(dir, W_OK))
    return FB_ERR(FB_EUSAGE, "--out: cannot create or write '%s'", dir);
  snprintf(path, sizeof path, "%s/dataset.csv", dir);
  fb_out_file out; /* written under a temporary name, renamed when complete */
  FB_TRY(fb_out_open(&out, path, "--out"));
  FILE *f = out.f;
  /* text fields lose their commas (-> ';') so that awk -F, and gnuplot read the file */
  fprintf(f, "row,profile,configuration,published,predicted,err_pct,unit,not_expressible\n");
  for (int i = 0; i < x->n; i++) {
    const ds_result *o = &x->res[i];
    char what[sizeof o->what], why[sizeof o->skip];
    snprintf(what, sizeof what, "%s", o->what);
    snprintf(why, sizeof why, "%s", o->skip);
    for (char *c = what; *c; c++) *c = *c == ',' ? ';' : *c;
    for (char *c = why; *c; c++) *c = *c == ',' ? ';' : *c;
    fprintf(f, "%d,%s,%s,%.6g,%.6g,%.3f,%s,%s\n", o->row, o->gpu, what, o->published,
            o->skip[0] ? NAN : o->predicted, o->skip[0] ? NAN : err_pct(o), x->unit, why);
  }
  return fb_out_commit(&out);
}

static void remove_tmpdir(const char *dir) {
  char path[128];
  snprintf(path, sizeof path, "%s/model.yaml", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/hw-triton.yaml", dir);
  unlink(path);
  rmdir(dir);
}

static void usage(FILE *f) {
  fprintf(f, "usage: fsdpbench validate --dataset FILE [--out DIR]\n"
             "reproduces every row of a public measurement file it can express with the\n"
             "simulator (training runs) or the cost model (GEMM, attention, collectives) and\n"
             "prints published vs predicted per row, then 'dev-set:' / 'op-set:' with the\n"
             "median and worst |error|. The file kinds are told apart by their header.\n");
}

int fb_validate_dataset_main(int argc, char **argv) {
  const char *file = NULL, *out = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **dst = !strcmp(a, "--dataset") ? &file : !strcmp(a, "--out") ? &out : NULL;
    if (!strncmp(a, "--dataset=", 10)) file = a + 10;
    else if (!strncmp(a, "--out=", 6)) out = a + 6;
    else if (!strcmp(a, "--help")) return usage(stdout), 0;
    else if (dst && i + 1 < argc) *dst = argv[++i];
    else {
      fprintf(stderr, "fsdpbench validate: error: %s: '%s' is not allowed with --dataset "
                      "(want --dataset FILE [--out DIR])\n", dst ? "missing value" : "flag", a);
      return 2;
    }
  }
  if (!file || !*file) {
    fprintf(stderr, "fsdpbench validate: error: --dataset: '' is not allowed (want a CSV file)\n");
    return 2;
  }
  static const char *const outputs[] = {"dataset.csv", NULL};
  fb_status st = out ? fb_check_output_dir(out, outputs, "--out") : FB_OK; /* before the rows */
  if (st != FB_OK) return fail(st);
  fb_csv t;
  st = fb_csv_read(file, "--dataset", &t);
  if (st != FB_OK) return fail(st);
  const ds_kind *kind = NULL;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !kind; i++)
    if (fb_csv_col(&t, kinds[i].key_column) >= 0) kind = &kinds[i];
  if (!kind) {
    fb_csv_free(&t);
    fprintf(stderr, "fsdpbench validate: error: --dataset: '%s' has none of the known headers "
                    "(a column tokens_per_s_per_gpu, shape_kind, head_dim or busbw_gbs)\n", file);
    return 2;
  }
  ds_ctx x = {.t = &t, .unit = kind->unit, .closing = kind->closing};
  x.res = calloc((size_t)t.nrows, sizeof *x.res);
  snprintf(x.tmpdir, sizeof x.tmpdir, "/tmp/fsdpbench-dataset-XXXXXX");
  if (!x.res || !mkdtemp(x.tmpdir)) {
    free(x.res);
    fb_csv_free(&t);
    fprintf(stderr, "fsdpbench validate: error: out of memory or no temporary directory\n");
    return 1;
  }
  printf("# fsdpbench validate --dataset %s: %s, %d rows; every predicted figure comes from the "
         "profiles in models/hardware/ as they are\n", file, kind->what, t.nrows - 1);
  for (int r = 1; r < t.nrows && st == FB_OK; r++) {
    ds_result *o = &x.res[x.n++];
    o->row = r;
    st = kind->row(&x, r, o);
  }
  remove_tmpdir(x.tmpdir);
  int rc = 0;
  if (st != FB_OK) {
    rc = fail(st);
  } else {
    print_rows(&x);
    print_summary(&x);
    if (out && (st = write_csv(&x, out)) != FB_OK) rc = fail(st);
  }
  free(x.res);
  fb_csv_free(&t);
  return rc;
}
