/* The attention step of `calibrate --backend cuda` (see calibrate_device.h), and the GPU
 * attention microbenchmark: this program's attention kernels (fb_k_attention_fwd / _bwd, i.e.
 * whatever the device's kernel table holds) timed causal at head dims 64 and 128 over
 * sequence lengths 512..8192, 16k tokens a call (batch = 16384 / T, heads = 2048 / hd: the
 * FlashAttention benchmark's setup, so the rows compare with attention.csv's). The profile's
 * attention curve (flash_fwd_efficiency, flash_bwd_efficiency, flash_half_seq on a GPU
 * profile; attention_efficiency on a CPU one) is fitted to the forward and backward times
 * through the cost model; with --attention-rows FILE the measurements are written as
 * attention.csv rows (impl "fsdpbench", fwd and fwd+bwd) that `validate --dataset FILE`
 * scores like the public and SDPA rows. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../engine/sim/cost_model.h"
#include "calibrate_device.h"

typedef struct attn_pt {
  int T, hd, B, H;
  double fwd, bwd; /* device seconds per call */
} attn_pt;

static const int attn_T[] = {512, 1024, 2048, 4096, 8192};
static const int attn_hd[] = {64, 128};
enum { NT = sizeof attn_T / sizeof attn_T[0], NHD = sizeof attn_hd / sizeof attn_hd[0] };

typedef struct attn_arg {
  attn_pt *p;
  fb_buf q, k, v, out, lse, dq, dk, dv, dout, scratch;
} attn_arg;

static fb_status run_fwd(fb_devcal *c, void *arg) {
  attn_arg *a = arg;
  const attn_pt *p = a->p;
  int ld = p->H * p->hd;
  return fb_k_attention_fwd(&c->k, a->out.ptr, a->lse.ptr, a->q.ptr, a->k.ptr, a->v.ptr, p->B,
                            p->T, p->H, p->H, p->hd, ld, ld, a->scratch.ptr);
}

static fb_status run_bwd(fb_devcal *c, void *arg) {
  attn_arg *a = arg;
  const attn_pt *p = a->p;
  int ld = p->H * p->hd;
  return fb_k_attention_bwd(&c->k, a->dq.ptr, a->dk.ptr, a->dv.ptr, a->dout.ptr, a->q.ptr,
                            a->k.ptr, a->v.ptr, a->out.ptr, a->lse.ptr, p->B, p->T, p->H, p->H,
                            p->hd, ld, ld, a->scratch.ptr);
}

/* Times one point's forward and backward (the forward's output feeds the backward). */
static fb_status time_point(fb_devcal *c, attn_pt *p) {
  attn_arg a = {.p = p};
  fb_buf *act[] = {&a.q, &a.k, &a.v, &a.out, &a.dq, &a.dk, &a.dv, &a.dout};
  enum { NA = sizeof act / sizeof act[0] };
  const size_t n = (size_t)p->B * p->T * p->H * p->hd * 2; /* bf16 */
  const int reps = c->small ? 2 : 5;
  fb_status st = FB_OK;
  for (size_t i = 0; i < NA && st == FB_OK; i++) st = fb_devcal_zalloc(c, n, act[i]);
  if (st == FB_OK) st = fb_devcal_zalloc(c, (size_t)p->B * p->H * p->T * 4, &a.lse);
  if (st == FB_OK)
    st = fb_devcal_zalloc(c, fb_attention_scratch_bytes(c->d, p->B, p->T, p->H, p->H, p->hd),
                          &a.scratch);
  if (st == FB_OK) st = fb_devcal_time(c, run_fwd, &a, reps, &p->fwd);
  if (st == FB_OK) st = fb_devcal_time(c, run_bwd, &a, reps, &p->bwd);
  for (size_t i = 0; i < NA; i++) fb_free(c->d, act[i], NULL);
  fb_free(c->d, &a.lse, NULL);
  fb_free(c->d, &a.scratch, NULL);
  return st;
}

/* ---- the fit ------------------------------------------------------------------------------- */

typedef struct attn_fit {
  fb_hardware *hw;
  const attn_pt *pts;
} attn_fit;

/* Point i / 2, forward (even i) or backward (odd i), as the cost model prices it. */
static double attn_model(void *ctx, int i) {
  const attn_fit *f = ctx;
  const attn_pt *p = &f->pts[i / 2];
  fb_op_cost c = fb_op_attention_cost(i % 2 ? "attention_bwd" : "attention_fwd", FB_BF16, p->B,
                                      p->T, p->H, p->H, p->hd, i % 2 ? 5 : 2, true);
  return fb_cost_seconds(f->hw, &c, 1);
}

/* The benchmark's FLOP convention: fwd 4*b*s^2*h*d / 2 (causal); fwd+bwd 3.5 x that. */
static double bench_flops(const attn_pt *p, bool bwd) {
  return 4.0 * p->B * (double)p->T * p->T * p->H * p->hd * 0.5 * (bwd ? 3.5 : 1.0);
}

static int attn_params(fb_hardware *h, fb_calib_param *p) {
  if (h->flash_fwd_eff > 0) {
    h->attention_kernel = FB_ATTN_FLASH2; /* the curve describes this program's kernels */
    p[0] = (fb_calib_param){"flash_fwd_efficiency", &h->flash_fwd_eff, 1e-4, 1};
    p[1] = (fb_calib_param){"flash_bwd_efficiency", &h->flash_bwd_eff, 1e-4, 1};
    p[2] = (fb_calib_param){"flash_half_seq", &h->flash_half_seq, 1, 1e5};
    return 3;
  }
  p[0] = (fb_calib_param){"attention_efficiency", &h->attn_eff, 1e-4, 1};
  return 1;
}

/* ---- the rows ------------------------------------------------------------------------------ */

typedef struct rows_arg {
  const fb_devcal *c;
  const attn_pt *pts;
  int n;
} rows_arg;

static fb_status write_rows(FILE *f, void *arg) {
  const rows_arg *r = arg;
  char when[32];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%d", localtime(&now));
  fputs("source_id,gpu,impl,pass,causal,seq_len,head_dim,batch,heads,dtype,tflops,note\n", f);
  for (int i = 0; i < r->n; i++)
    for (int b = 0; b < 2; b++) {
      const attn_pt *p = &r->pts[i];
      double t = b ? p->fwd + p->bwd : p->fwd;
      fprintf(f, "fsdpbench-calibrate,%s,fsdpbench,%s,True,%d,%d,%d,%d,bf16,%.4g,\"fsdpbench "
                 "calibrate --backend %s %s: fb_k_attention_fwd%s (this program's kernels), "
                 "device time of back-to-back calls; fwd = 4*b*s^2*h*d/2, fwd+bwd = 3.5 fwd\"\n",
              r->c->gpu, b ? "fwd+bwd" : "fwd", p->T, p->hd, p->B, p->H,
              bench_flops(p, b) / t * 1e-12, r->c->o->backend, when, b ? " + _bwd" : "");
    }
  return ferror(f) ? FB_ERR(FB_EIO, "cannot write %s", r->c->o->rows) : FB_OK;
}

fb_status fb_devcal_attention(fb_devcal *c) {
  attn_pt pts[NT * NHD];
  int n = 0;
  for (int h = 0; h < NHD; h++)
    for (int i = 0; i < NT; i++) {
      attn_pt *p = &pts[n++];
      /* small (--quick, a CPU device: the cpu-opaque stand-in): 32..256 tokens, head dim 16
       * and 32 */
      p->T = c->small ? attn_T[i] / 16 : attn_T[i];
      p->hd = c->small ? attn_hd[h] / 4 : attn_hd[h];
      p->B = (c->small ? 256 : 16384) / p->T;
      p->H = (c->small ? 64 : 2048) / p->hd;
      if (c->small && p->T > 128) n--; /* keep the small grid small */
      else FB_TRY(time_point(c, p));
    }
  double t[2 * NT * NHD];
  for (int i = 0; i < n; i++) t[2 * i] = pts[i].fwd, t[2 * i + 1] = pts[i].bwd;
  fb_calib_param p[3];
  int np = attn_params(&c->hw, p);
  attn_fit f = {.hw = &c->hw, .pts = pts};
  double rms = fb_calib_fit_figures(p, np, t, 2 * n, attn_model, &f);
  char how[160];
  snprintf(how, sizeof how, "this program's attention kernels, %d shapes fwd and bwd, fit RMS "
           "of log error %.3f", n, rms);
  for (int i = 0; i < np; i++) fb_devcal_tag_key(c, p[i].key, *p[i].v, how);
  printf("\n  attention (this program's kernels, causal)   fwd TFLOP/s model   fwd+bwd model\n");
  for (int i = 0; i < n; i++)
    printf("  seq %5d hd %3d (B %3d H %3d) %22.4g %6.4g %9.4g %6.4g\n", pts[i].T, pts[i].hd,
           pts[i].B, pts[i].H, bench_flops(&pts[i], false) / pts[i].fwd * 1e-12,
           bench_flops(&pts[i], false) / attn_model(&f, 2 * i) * 1e-12,
           bench_flops(&pts[i], true) / (pts[i].fwd + pts[i].bwd) * 1e-12,
           bench_flops(&pts[i], true) / (attn_model(&f, 2 * i) + attn_model(&f, 2 * i + 1)) *
               1e-12);
  if (!c->o->rows[0]) return FB_OK;
  rows_arg r = {c, pts, n};
  FB_TRY(fb_calib_write_file(c->o->rows, write_rows, &r, c->o->force));
  printf("  attention rows (impl fsdpbench): %s; score them with `fsdpbench validate --dataset "
         "%s`\n", c->o->rows, c->o->rows);
  return FB_OK;
}
