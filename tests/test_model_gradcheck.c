/* Whole-model gradient check in double precision: the real transformer stages (encoder,
 * blocks, head with fused softmax cross-entropy, backward in reverse) run on the cpu device
 * with fp64 activations, parameters and gradients, for a tiny GPT-2 (tied head, learned
 * positions) and a tiny Llama (untied head, grouped-query attention, RoPE, SwiGLU). Every
 * analytic gradient element sampled is compared with a central finite difference of the loss.
 * This is what backs the composition (residual accumulation, tied-weight gradients, strides
 * of the fused qkv buffer) on top of the per-op checks in test_ops_gradcheck. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/model/init.h"
#include "engine/model/transformer.h"
#include "engine/backends/registry.h"

enum { B = 2, T = 5 };

typedef struct ctx {
  fb_model m;
  fb_device *dev;
  fb_stream *s;
  double **params, **grads; /* host == device memory on the cpu backend */
  int32_t tok[B * T], tgt[B * T];
} ctx;

/* loss * dscale, gradients into c->grads (zeroed first) */
static double forward_backward(ctx *c) {
  const int L = c->m.spec.layers;
  for (int u = 0; u < c->m.nunits; u++) memset(c->grads[u], 0, c->m.units[u].numel * 8);
  double loss = 0;
  fb_tf t;
  const float dscale = 1.0f / (B * T);
  CHECK_OK(fb_tf_begin(&t, &c->m, c->dev, c->s, FB_F64, B, T, false, c->tok, c->tgt, dscale,
                       &loss));
  CHECK_OK(fb_tf_encoder_fwd(&t, c->params[0]));
  for (int l = 1; l <= L; l++) CHECK_OK(fb_tf_block_fwd(&t, l, c->params[l]));
  CHECK_OK(fb_tf_head(&t, c->params[0], c->grads[0]));
  for (int l = L; l >= 1; l--) CHECK_OK(fb_tf_block_bwd(&t, l, c->params[l], c->grads[l]));
  CHECK_OK(fb_tf_encoder_bwd(&t, c->grads[0]));
  fb_tf_end(&t);
  return loss * dscale;
}

static void check_family(const char *name, fb_model_spec spec) {
  ctx c = {0};
  CHECK_OK(fb_model_build(&spec, &c.m));
  CHECK_OK(fb_device_open(fb_device_lookup("cpu"), 0, 1, 1, 0, NULL, &c.dev));
  CHECK_OK(c.dev->ops->stream_create(c.dev, FB_STREAM_COMPUTE, &c.s));
  c.params = calloc(c.m.nunits, sizeof *c.params);
  c.grads = calloc(c.m.nunits, sizeof *c.grads);
  for (int u = 0; u < c.m.nunits; u++) {
    int64_t n = c.m.units[u].numel;
    float *f = calloc(n, sizeof *f);
    fb_unit_init(&c.m, u, 42, 0, n, f);
    c.params[u] = calloc(n, sizeof(double));
    c.grads[u] = calloc(n, sizeof(double));
    for (int64_t i = 0; i < n; i++) c.params[u][i] = f[i];
    free(f);
  }
  uint64_t x = 12345;
  for (int i = 0; i < B * T; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c.tok[i] = (int32_t)((x >> 33) % spec.vocab);
    c.tgt[i] = (int32_t)((x >> 45) % spec.vocab);
  }
  c.tgt[3] = -1; /* an ignored position */
  forward_backward(&c);
  double **g = calloc(c.m.nunits, sizeof *g);
  for (int u = 0; u < c.m.nunits; u++) {
    g[u] = malloc(c.m.units[u].numel * 8);
    memcpy(g[u], c.grads[u], c.m.units[u].numel * 8);
  }
  double worst = 0;
  int checked = 0;
  const double h = 1e-5;
  for (int i = 0; i < c.m.nparams; i++) {
    const fb_param *p = &c.m.params[i];
    /* a few elements of every parameter, spread over it */
    for (int k = 0; k < 4; k++) {
      int64_t e = p->offset + (p->numel - 1) * k / 3;
      double *th = &c.params[p->unit][e], keep = *th;
      *th = keep + h;
      double lp = forward_backward(&c);
      *th = keep - h;
      double lm = forward_backward(&c);
      *th = keep;
      double fd = (lp - lm) / (2 * h), an = g[p->unit][e];
      /* relative error, with an absolute floor for gradients that are zero in theory (e.g. a
       * key bias: softmax is invariant to it) where the difference is rounding noise */
      double err = fabs(fd - an) / (fabs(fd) + fabs(an) + 1e-7);
      if (err > worst && fabs(fd - an) > 1e-9) worst = err;
      checked++;
      CHECK(err < 1e-5 || fabs(fd - an) < 1e-9, "%s %s[%lld]: analytic %.12g, finite difference %.12g (rel %.2e)", name,
            p->name, (long long)(e - p->offset), an, fd, err);
    }
  }
  printf("%s: %d gradient elements of %d parameters checked, worst relative error %.2e\n", name,
         checked, c.m.nparams, worst);
  for (int u = 0; u < c.m.nunits; u++) {
    free(c.params[u]);
    free(c.grads[u]);
    free(g[u]);
  }
  free(g);
  free(c.params);
  free(c.grads);
  c.dev->ops->stream_destroy(c.dev, c.s);
  fb_device_close(c.dev);
  fb_model_free(&c.m);
}

int main(void) {
  fb_model_spec gpt2 = {.name = "tiny-gpt2", .family = FB_GPT2, .vocab = 17, .dim = 8,
                        .layers = 2, .heads = 2, .kv_heads = 2, .ffn = 12, .max_seq = 8,
                        .norm_eps = 1e-5f, .init_std = 0.3f, .tied = true};
  fb_model_spec llama = {.name = "tiny-llama", .family = FB_LLAMA, .vocab = 19, .dim = 16,
                         .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 24, .max_seq = 8,
                         .norm_eps = 1e-5f, .rope_theta = 10000.0f, .init_std = 0.3f,
                         .tied = false};
  check_family("gpt2", gpt2);
  check_family("llama", llama);
  llama.tied = true;
  check_family("llama-tied", llama);
  return fb_test_done("test_model_gradcheck");
}
