/* cuBLASLt GEMMs with an epilogue (see gemm_lt.h). The algorithm cache is a list per device,
 * searched linearly (a step has a few dozen distinct problems), guarded by the device's
 * blas_mu like every cuBLAS call. */
#include "gemm_lt.h"

#include <stdlib.h>
#include <string.h>

typedef struct lt_key { /* compared with memcmp: no padding (pad makes 12 ints) */
  int ta, tb, m, n, k, lda, ldb, ldd, dt, epi, beta0, pad;
  int64_t ldaux;
} lt_key;

typedef struct lt_entry {
  lt_key key;
  bool ok; /* the heuristic offered an algorithm */
  cublasLtMatmulAlgo_t algo;
} lt_entry;

struct fb_lt_cache {
  lt_entry *v;
  size_t n, cap;
};

fb_status fb_lt_init(fb_device *d) {
  fb_cuda_dev *c = fb_cuda_of(d);
  cublasStatus_t s = cublasLtCreate(&c->blaslt);
  if (s != CUBLAS_STATUS_SUCCESS)
    return FB_ERR(FB_EDEVICE, "rank %d: cublasLtCreate failed: %s", d->rank,
                  cublasGetStatusString(s));
  c->lt_cache = calloc(1, sizeof *c->lt_cache);
  if (!c->lt_cache) {
    cublasLtDestroy(c->blaslt);
    return FB_ERR(FB_ENOMEM, "rank %d: out of host memory (cuBLASLt cache)", d->rank);
  }
  return FB_OK;
}

void fb_lt_fini(fb_device *d) {
  fb_cuda_dev *c = fb_cuda_of(d);
  if (c->lt_cache) free(c->lt_cache->v);
  free(c->lt_cache);
  c->lt_cache = NULL;
  cublasLtDestroy(c->blaslt);
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Whether the epilogue's operands and every leading dimension keep 16-byte alignment. */
static bool lt_aligned(const void *A, int lda, const void *B, int ldb, const void *D, int ldd,
                       const fb_lt_epilogue *e, size_t es) {
  if (!aligned16(A) || !aligned16(B) || !aligned16(D) || !aligned16(e->bias) ||
      !aligned16(e->aux))
    return false;
  if ((size_t)lda * es % 16 || (size_t)ldb * es % 16 || (size_t)ldd * es % 16) return false;
  return !e->aux || (e->ldaux % 8 == 0 && (size_t)e->ldaux * es % 16 == 0);
}

typedef struct lt_problem {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
} lt_problem;

static void problem_free(lt_problem *p) {
  if (p->d) cublasLtMatrixLayoutDestroy(p->d);
  if (p->b) cublasLtMatrixLayoutDestroy(p->b);
  if (p->a) cublasLtMatrixLayoutDestroy(p->a);
  if (p->desc) cublasLtMatmulDescDestroy(p->desc);
}

#define LT_SET(obj, attr, val)                                                                 \
  (st == CUBLAS_STATUS_SUCCESS ? cublasLtMatmulDescSetAttribute(obj, attr, &(val), sizeof(val)) \
                               : st)

/* The descriptor and layouts of one call (its pointers included: the heuristic reads the
 * alignment of the bias and auxiliary pointers from them). */
static cublasStatus_t problem_make(lt_problem *p, cudaDataType_t t, cublasOperation_t ta,
                                   cublasOperation_t tb, int m, int n, int kk, int lda, int ldb,
                                   int ldd, const fb_lt_epilogue *e) {
  memset(p, 0, sizeof *p);
  cublasStatus_t st = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int32_t opa = ta, opb = tb;
  const uint32_t epi = e->epi;
  st = LT_SET(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, opa);
  st = LT_SET(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, opb);
  st = LT_SET(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  if (e->bias) st = LT_SET(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, e->bias);
  if (e->aux) {
    st = LT_SET(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e->aux);
    st = LT_SET(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, e->ldaux);
  }
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p->a, t, ta == CUBLAS_OP_N ? m : kk,
                                    ta == CUBLAS_OP_N ? kk : m, lda);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p->b, t, tb == CUBLAS_OP_N ? kk : n,
                                    tb == CUBLAS_OP_N ? n : kk, ldb);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->d, t, m, n, ldd);
  return st;
}

/* The cached algorithm of `key`, asking the heuristic the first time (blas_mu held). */
static fb_status lt_algo(const fb_kctx *k, fb_cuda_dev *c, const lt_key *key, lt_problem *p,
                         const lt_entry **out) {
  struct fb_lt_cache *ch = c->lt_cache;
  for (size_t i = 0; i < ch->n; i++)
    if (!memcmp(&ch->v[i].key, key, sizeof *key)) {
      *out = &ch->v[i];
      return FB_OK;
    }
  if (ch->n == ch->cap) {
    size_t cap = ch->cap ? 2 * ch->cap : 64;
    lt_entry *v = realloc(ch->v, cap * sizeof *v);
    if (!v) return FB_ERR(FB_ENOMEM, "rank %d: out of host memory (cuBLASLt cache)", k->dev->rank);
    ch->v = v, ch->cap = cap;
  }
  lt_entry *en = &ch->v[ch->n];
  memset(en, 0, sizeof *en);
  en->key = *key;
  cublasLtMatmulPreference_t pref = NULL;
  cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
  const uint64_t ws = FB_CUDA_BLAS_WS_BYTES;
  const uint32_t al = 16;
  const cublasLtMatmulPreferenceAttributes_t aligns[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws);
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
    st = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al);
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(c->blaslt, p->desc, p->a, p->b, p->d, p->d, pref, 1,
                                        &res, &found);
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  /* no algorithm (or an unsupported epilogue for this dtype and layout): the unfused path */
  en->ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS;
  if (en->ok) en->algo = res.algo;
  ch->n++;
  *out = en;
  return FB_OK;
}

fb_status fb_lt_gemm(const fb_kctx *k, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                     int kk, const void *A, int lda, const void *B, int ldb, float beta, void *D,
                     int ldd, const fb_lt_epilogue *e, bool *ran) {
  *ran = false;
  const size_t es = fb_dtype_size(k->act);
  if (!lt_aligned(A, lda, B, ldb, D, ldd, e, es)) return FB_OK;
  fb_cuda_dev *c = fb_cuda_of(k->dev);
  const cudaDataType_t t = k->act == FB_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const lt_key key = {.ta = ta, .tb = tb, .m = m, .n = n, .k = kk, .lda = lda, .ldb = ldb,
                 .ldd = ldd, .dt = (int)t, .epi = (int)e->epi, .beta0 = beta == 0.0f,
                 .ldaux = e->aux ? e->ldaux : 0};
  lt_problem p;
  cublasStatus_t bs = problem_make(&p, t, ta, tb, m, n, kk, lda, ldb, ldd, e);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    problem_free(&p);
    return FB_ERR(FB_EDEVICE, "rank %d: cuBLASLt descriptors: %s", k->dev->rank,
                  cublasGetStatusString(bs));
  }
  const float alpha = 1.0f;
  const lt_entry *en = NULL;
  pthread_mutex_lock(&c->blas_mu);
  fb_status s = lt_algo(k, c, &key, &p, &en);
  if (s == FB_OK && en->ok) {
    bs = cublasLtMatmul(c->blaslt, p.desc, &alpha, A, p.a, B, p.b, &beta, D, p.d, D, p.d,
                        &en->algo, k->s->blas_ws, FB_CUDA_BLAS_WS_BYTES, k->s->s);
    s = bs == CUBLAS_STATUS_SUCCESS
            ? FB_OK
            : FB_ERR(FB_EDEVICE, "rank %d: cublasLtMatmul (epilogue %d, %d x %d x %d) failed: %s",
                     k->dev->rank, (int)e->epi, m, n, kk, cublasGetStatusString(bs));
    *ran = s == FB_OK;
  }
  pthread_mutex_unlock(&c->blas_mu);
  problem_free(&p);
  return s;
}
