/* The head's padded vocabulary (fb_tf_logits.vocab_multiple, what a GPU run uses) changes
 * nothing but the GEMMs' shapes: on the cpu device, the real transformer stages run forward and
 * backward with the vocabulary as it is and padded to a multiple of 128 (200 -> 256 columns),
 * and the loss and every gradient element must be equal bit for bit. Tiny GPT-2 (tied head),
 * Llama (untied) and tied Llama; fp32, bf16 and fp64 activations; the logits whole and in
 * chunks of 3 rows (the gradient copy accumulates across chunks). The padded run must really
 * pad: it allocates more (the [Vp, C] copies) and its logits take more temporary memory.
 * The vocabulary stays within one of the BLAS's K blocks: the input gradient's GEMM sums over
 * the (padded) vocabulary, and OpenBLAS balances its last two K blocks by the length, so past
 * a block (e.g. 5001 -> 5120) the padded zeros move a block boundary and that gradient, with
 * everything upstream of it, differs in the last bits (measured: ~3.5k of the elements), while
 * the loss and the head's weight gradient stay equal. The padding itself adds exact zeros. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/model/init.h"
#include "engine/ops/elementwise.h"
#include "engine/backends/registry.h"
#include "engine/model/transformer.h"

enum { B = 2, T = 7 };

typedef struct run_out {
  double loss;
  void **grads; /* [nunits], the activation dtype */
  int64_t n_alloc, temp_peak;
} run_out;

/* One forward and backward on a fresh cpu device; params[u] in the activation dtype. */
static void run(const fb_model *m, fb_dtype act, void **params, const int32_t *tok,
                const int32_t *tgt, const fb_tf_logits *lg, run_out *o) {
  fb_device *dev = NULL;
  fb_stream *s = NULL;
  CHECK_OK(fb_device_open(fb_device_lookup("cpu"), 0, 1, 1, 0, NULL, &dev));
  CHECK_OK(dev->ops->stream_create(dev, FB_STREAM_COMPUTE, &s));
  const size_t es = fb_dtype_size(act);
  o->grads = calloc((size_t)m->nunits, sizeof *o->grads);
  for (int u = 0; u < m->nunits; u++) o->grads[u] = calloc((size_t)m->units[u].numel, es);
  o->loss = 0;
  fb_tf t;
  const int L = m->spec.layers;
  CHECK_OK(fb_tf_begin(&t, m, dev, s, act, B, T, FB_RECOMPUTE_OFF, tok, tgt, 1.0f / (B * T),
                       &o->loss));
  t.logits = lg;
  CHECK_OK(fb_tf_encoder_fwd(&t, params[0]));
  for (int l = 1; l <= L; l++) CHECK_OK(fb_tf_block_fwd(&t, l, params[l]));
  CHECK_OK(fb_tf_head(&t, params[0], o->grads[0]));
  for (int l = L; l >= 1; l--) CHECK_OK(fb_tf_block_bwd(&t, l, params[l], o->grads[l]));
  CHECK_OK(fb_tf_encoder_bwd(&t, o->grads[0]));
  fb_tf_end(&t);
  CHECK_OK(fb_stream_sync(dev, s));
  o->n_alloc = dev->mem.n_alloc;
  o->temp_peak = dev->mem.peak[FB_MEM_TEMP];
  dev->ops->stream_destroy(dev, s);
  fb_device_close(dev);
}

static void free_out(const fb_model *m, run_out *o) {
  for (int u = 0; u < m->nunits; u++) free(o->grads[u]);
  free(o->grads);
}

/* params in act from the counter-based init (fp32), rounded or widened as the dtype needs */
static void **make_params(const fb_model *m, fb_dtype act) {
  void **p = calloc((size_t)m->nunits, sizeof *p);
  for (int u = 0; u < m->nunits; u++) {
    const int64_t n = m->units[u].numel;
    float *f = calloc((size_t)n, sizeof *f);
    fb_unit_init(m, u, 7, 0, n, f);
    p[u] = calloc((size_t)n, fb_dtype_size(act));
    for (int64_t i = 0; i < n; i++) {
      if (act == FB_F64) ((double *)p[u])[i] = f[i];
      else if (act == FB_BF16) ((uint16_t *)p[u])[i] = fb_f32_to_bf16(f[i]);
      else ((float *)p[u])[i] = f[i];
    }
    free(f);
  }
  return p;
}

static void check_case(const char *name, const fb_model_spec *spec, fb_dtype act,
                       size_t chunk_bytes) {
  fb_model m;
  CHECK_OK(fb_model_build(spec, &m));
  int32_t tok[B * T], tgt[B * T];
  uint64_t x = 99;
  for (int i = 0; i < B * T; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    tok[i] = (int32_t)((x >> 33) % spec->vocab);
    tgt[i] = (int32_t)((x >> 45) % spec->vocab);
  }
  tgt[4] = -1; /* an ignored position */
  tgt[5] = spec->vocab - 1; /* the last logical column */
  void **params = make_params(&m, act);
  const fb_tf_logits plain = {.chunk_bytes = chunk_bytes, .rows = 1, .vocab_multiple = 1};
  const fb_tf_logits padded = {.chunk_bytes = chunk_bytes, .rows = 1, .vocab_multiple = 128};
  run_out a, b;
  run(&m, act, params, tok, tgt, &plain, &a);
  run(&m, act, params, tok, tgt, &padded, &b);
  CHECK(!memcmp(&a.loss, &b.loss, sizeof a.loss), "%s %s: loss %.17g unpadded, %.17g padded",
        name, fb_dtype_name(act), a.loss, b.loss);
  int64_t diff = 0;
  for (int u = 0; u < m.nunits; u++) {
    const size_t es = fb_dtype_size(act);
    for (int64_t i = 0; i < m.units[u].numel; i++)
      diff += memcmp((char *)a.grads[u] + i * es, (char *)b.grads[u] + i * es, es) != 0;
  }
  CHECK(diff == 0, "%s %s: %lld gradient elements differ between the padded and unpadded head",
        name, fb_dtype_name(act), (long long)diff);
  CHECK(b.n_alloc > a.n_alloc && b.temp_peak > a.temp_peak,
        "%s %s: the padded run did not pad (allocations %lld vs %lld, temporary peak %lld vs "
        "%lld)", name, fb_dtype_name(act), (long long)b.n_alloc, (long long)a.n_alloc,
        (long long)b.temp_peak, (long long)a.temp_peak);
  printf("%s %s chunk %zu B: loss %.9g, gradients equal bit for bit (%d units)\n", name,
         fb_dtype_name(act), chunk_bytes, a.loss, m.nunits);
  free_out(&m, &a);
  free_out(&m, &b);
  for (int u = 0; u < m.nunits; u++) free(params[u]);
  free(params);
  fb_model_free(&m);
}

int main(void) {
  fb_model_spec gpt2 = {.name = "tiny-gpt2", .family = FB_GPT2, .vocab = 200, .dim = 16,
                        .layers = 2, .heads = 2, .kv_heads = 2, .ffn = 24, .max_seq = 8,
                        .norm_eps = 1e-5f, .init_std = 0.3f, .tied = true};
  fb_model_spec llama = {.name = "tiny-llama", .family = FB_LLAMA, .vocab = 200, .dim = 16,
                         .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 24, .max_seq = 8,
                         .norm_eps = 1e-5f, .rope_theta = 10000.0f, .init_std = 0.3f,
                         .tied = false};
  fb_model_spec llama_tied = llama;
  llama_tied.tied = true;
  snprintf(llama_tied.name, sizeof llama_tied.name, "tiny-llama-tied");
  const fb_dtype acts[] = {FB_F32, FB_BF16, FB_F64};
  /* whole logits; chunks of 3 rows of the padded width (and so of the unpadded one too) */
  const size_t chunks[] = {(size_t)64 << 20, (size_t)3 * 256 * 4};
  for (int a = 0; a < 3; a++)
    for (int c = 0; c < 2; c++) {
      check_case("gpt2", &gpt2, acts[a], chunks[c]);
      check_case("llama", &llama, acts[a], chunks[c]);
      check_case("llama-tied", &llama_tied, acts[a], chunks[c]);
    }
  return fb_test_done("test_vocab_pad");
}
