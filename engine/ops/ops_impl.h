/* The body of every CPU op, written once for one element type. Included by ops_f32.c and
 * ops_f64.c after defining:
 *   REAL          element type (float / double)
 *   OPN(x)        suffixed public name (x##_f32 / x##_f64)
 *   LOC(x)        suffixed file-local name
 *   R_EXP, R_LOG, R_SQRT    math for REAL
 *   R_GEMM        cblas_sgemm / cblas_dgemm
 *   R_GELU, R_GELU_GRAD, R_SWIGLU, R_SWIGLU_GRAD, R_ADAMW, R_SGD   (elementwise.h)
 *   R_ADAMW_BLOCK (optional) a vectorised AdamW over one block, see fb_adamw
 * Determinism: every parallel loop splits work into pieces that do not depend on the thread
 * count (rows, heads, column blocks, fixed element blocks), and each piece is computed by one
 * thread in a fixed order. Row reductions use 8 interleaved partial sums combined in a fixed
 * order (vectorisable, still deterministic). No include guard on purpose. */

#define EW_BLOCK 8192 /* elements per work item of elementwise loops */
#define COL_BLOCK 128 /* columns per work item of column reductions (dw, db, dbias, dwte) */
#define ATT_BQ 64     /* queries per attention block */

static inline size_t LOC(min_sz)(size_t a, size_t b) { return a < b ? a : b; }

/* sum of x[0..n) with 8 lanes: lane j takes i = j mod 8; lanes then combined pairwise. */
static inline REAL LOC(rsum)(const REAL *x, int n) {
  REAL acc[8] = {0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) acc[j] += x[i + j];
  for (int j = 0; i < n; i++, j++) acc[j] += x[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}
static inline REAL LOC(rdot)(const REAL *x, const REAL *y, int n) {
  REAL acc[8] = {0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) acc[j] += x[i + j] * y[i + j];
  for (int j = 0; i < n; i++, j++) acc[j] += x[i] * y[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* ---- encoder --------------------------------------------------------------------------- */
void OPN(fb_encoder_fwd)(REAL *out, const int32_t *tok, const REAL *wte, const REAL *wpe,
                         int B, int T, int C) {
  int64_t N = (int64_t)B * T;
#pragma omp parallel for schedule(static) if (N * C > EW_BLOCK)
  for (int64_t n = 0; n < N; n++) {
    REAL *o = out + n * C;
    const REAL *e = wte + (int64_t)tok[n] * C;
    if (wpe) {
      const REAL *p = wpe + (n % T) * C;
      for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    } else {
      for (int c = 0; c < C; c++) o[c] = e[c];
    }
  }
}

/* Column blocks in parallel; inside a block, tokens in order: deterministic scatter-add. */
void OPN(fb_encoder_bwd)(REAL *dwte, REAL *dwpe, const REAL *dout, const int32_t *tok, int B,
                         int T, int C) {
  int64_t N = (int64_t)B * T;
  int ncb = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if (N * C > EW_BLOCK)
  for (int cb = 0; cb < ncb; cb++) {
    int c0 = cb * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
    for (int64_t n = 0; n < N; n++) {
      const REAL *d = dout + n * C;
      REAL *e = dwte + (int64_t)tok[n] * C;
      for (int c = c0; c < c1; c++) e[c] += d[c];
      if (dwpe) {
        REAL *p = dwpe + (n % T) * C;
        for (int c = c0; c < c1; c++) p[c] += d[c];
      }
    }
  }
}

/* ---- layernorm ------------------------------------------------------------------------- */
void OPN(fb_layernorm_fwd)(REAL *out, REAL *mean, REAL *rstd, const REAL *inp, const REAL *w,
                           const REAL *b, int N, int C, REAL eps) {
#pragma omp parallel for schedule(static) if ((int64_t)N * C > EW_BLOCK)
  for (int n = 0; n < N; n++) {
    const REAL *x = inp + (int64_t)n * C;
    REAL *o = out + (int64_t)n * C;
    REAL m = LOC(rsum)(x, C) / (REAL)C;
    for (int c = 0; c < C; c++) o[c] = x[c] - m; /* centred values, reused below */
    REAL var = LOC(rdot)(o, o, C) / (REAL)C;
    REAL s = (REAL)1 / R_SQRT(var + eps);
    for (int c = 0; c < C; c++) o[c] = o[c] * s * w[c] + (b ? b[c] : (REAL)0);
    mean[n] = m;
    rstd[n] = s;
  }
}

/* dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * w, over
 * rows in parallel; then dw += sum_n dout * norm, db += sum_n dout over column blocks. */
void OPN(fb_layernorm_bwd)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout, const REAL *inp,
                           const REAL *w, const REAL *mean, const REAL *rstd, int N, int C) {
  assert(dinp != dout && dinp != inp); /* the column loop may run beside the row loop */
  int big = (int64_t)N * C > EW_BLOCK;
  int ncb = (C + COL_BLOCK - 1) / COL_BLOCK;
  /* one team: the row loop (dinp) and the column loop (dw, db) write disjoint outputs and
   * read only inputs, so the rows need no barrier before the columns */
#pragma omp parallel if (big)
  {
#pragma omp for schedule(static) nowait
  for (int n = 0; n < N; n++) {
    const REAL *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
    REAL *di = dinp + (int64_t)n * C;
    REAL m = mean[n], s = rstd[n];
    REAL a8[8] = {0}, b8[8] = {0};
    int c = 0;
    for (; c + 8 <= C; c += 8)
      for (int j = 0; j < 8; j++) {
        REAL dn = d[c + j] * w[c + j];
        a8[j] += dn;
        b8[j] += dn * ((x[c + j] - m) * s);
      }
    for (int j = 0; c < C; c++, j++) {
      REAL dn = d[c] * w[c];
      a8[j] += dn;
      b8[j] += dn * ((x[c] - m) * s);
    }
    REAL dmean = (((a8[0] + a8[4]) + (a8[1] + a8[5])) + ((a8[2] + a8[6]) + (a8[3] + a8[7]))) /
                 (REAL)C;
    REAL dnmean = (((b8[0] + b8[4]) + (b8[1] + b8[5])) + ((b8[2] + b8[6]) + (b8[3] + b8[7]))) /
                  (REAL)C;
    for (c = 0; c < C; c++) {
      REAL norm = (x[c] - m) * s;
      di[c] += s * (d[c] * w[c] - dmean - norm * dnmean);
    }
  }
#pragma omp for schedule(static)
  for (int cb = 0; cb < ncb; cb++) {
    int c0 = cb * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
    for (int n = 0; n < N; n++) {
      const REAL *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
      REAL m = mean[n], s = rstd[n];
      for (int c = c0; c < c1; c++) dw[c] += d[c] * ((x[c] - m) * s);
      if (db)
        for (int c = c0; c < c1; c++) db[c] += d[c];
    }
  }
  }
}

/* ---- rmsnorm --------------------------------------------------------------------------- */
void OPN(fb_rmsnorm_fwd)(REAL *out, REAL *rstd, const REAL *inp, const REAL *w, int N, int C,
                         REAL eps) {
#pragma omp parallel for schedule(static) if ((int64_t)N * C > EW_BLOCK)
  for (int n = 0; n < N; n++) {
    const REAL *x = inp + (int64_t)n * C;
    REAL *o = out + (int64_t)n * C;
    REAL s = (REAL)1 / R_SQRT(LOC(rdot)(x, x, C) / (REAL)C + eps);
    for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
    rstd[n] = s;
  }
}

/* dinp += rstd * (dout*w - norm * mean(dout*w*norm)), norm = x*rstd; dw += sum_n dout*norm. */
void OPN(fb_rmsnorm_bwd)(REAL *dinp, REAL *dw, const REAL *dout, const REAL *inp, const REAL *w,
                         const REAL *rstd, int N, int C) {
  assert(dinp != dout && dinp != inp); /* the column loop may run beside the row loop */
  int big = (int64_t)N * C > EW_BLOCK;
  int ncb = (C + COL_BLOCK - 1) / COL_BLOCK;
  /* one team: the row loop (dinp) and the column loop (dw, db) write disjoint outputs and
   * read only inputs, so the rows need no barrier before the columns */
#pragma omp parallel if (big)
  {
#pragma omp for schedule(static) nowait
  for (int n = 0; n < N; n++) {
    const REAL *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
    REAL *di = dinp + (int64_t)n * C;
    REAL s = rstd[n];
    REAL b8[8] = {0};
    int c = 0;
    for (; c + 8 <= C; c += 8)
      for (int j = 0; j < 8; j++) b8[j] += d[c + j] * w[c + j] * (x[c + j] * s);
    for (int j = 0; c < C; c++, j++) b8[j] += d[c] * w[c] * (x[c] * s);
    REAL dnmean = (((b8[0] + b8[4]) + (b8[1] + b8[5])) + ((b8[2] + b8[6]) + (b8[3] + b8[7]))) /
                  (REAL)C;
    for (c = 0; c < C; c++) di[c] += s * (d[c] * w[c] - (x[c] * s) * dnmean);
  }
#pragma omp for schedule(static)
  for (int cb = 0; cb < ncb; cb++) {
    int c0 = cb * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
    for (int n = 0; n < N; n++) {
      const REAL *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
      REAL s = rstd[n];
      for (int c = c0; c < c1; c++) dw[c] += d[c] * (x[c] * s);
    }
  }
  }
}

/* ---- GEMM with a result independent of the thread count ---------------------------------
 * Multithreaded BLAS GEMMs may round differently with different thread counts (OpenBLAS
 * 0.3.21 does for some shapes). So the larger output dimension is cut into panels whose number
 * depends only on the shape and on the machine's online processor count
 * (fb_ops_gemm_split_procs: never on a thread setting, nor on the affinity mask that taskset or
 * mpirun's binding set, which omp_get_num_procs follows), and each panel is one
 * single-threaded BLAS call (BLAS called inside an OpenMP parallel region runs on one thread)
 * on one OpenMP thread. Two panels per processor at most keep the
 * repeated packing of the shared operand cheap. Row-major C[M,N] = alpha op(A) op(B) + beta C. */
#define GEMM_PANEL_MIN 128 /* smallest panel; panel widths are multiples of 16 */
void OPN(fb_gemm)(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, REAL alpha,
                  const REAL *A, int lda, const REAL *B, int ldb, REAL beta, REAL *C, int ldc) {
  int split_n = N >= M, D = split_n ? N : M;
  /* every panel packs the shared operand (K x the other side) again: where K dwarfs the
   * panels' own width (the tied head's backward, K = vocabulary) one panel per processor */
  int np = D / GEMM_PANEL_MIN, npmax = (K > 8 * D ? 1 : 2) * fb_ops_gemm_split_procs();
  np = np < 1 ? 1 : (np > npmax ? npmax : np);
  int width = ((D + np - 1) / np + 15) / 16 * 16;
  np = (D + width - 1) / width;
  /* always a parallel region, even for one panel: BLAS must not thread inside */
#pragma omp parallel for schedule(static)
  for (int p = 0; p < np; p++) {
    int d0 = p * width, dn = D - d0 < width ? D - d0 : width;
    if (split_n) { /* columns d0.. of op(B) and C */
      const REAL *Bp = tb == CblasNoTrans ? B + d0 : B + (int64_t)d0 * ldb;
      R_GEMM(CblasRowMajor, ta, tb, M, dn, K, alpha, A, lda, Bp, ldb, beta, C + d0, ldc);
    } else { /* rows d0.. of op(A) and C */
      const REAL *Ap = ta == CblasNoTrans ? A + (int64_t)d0 * lda : A + d0;
      R_GEMM(CblasRowMajor, ta, tb, dn, N, K, alpha, Ap, lda, B, ldb, beta,
             C + (int64_t)d0 * ldc, ldc);
    }
  }
}
#undef GEMM_PANEL_MIN

/* ---- matmul (weights [OC, C]) --------------------------------------------------------- */
void OPN(fb_matmul_fwd)(REAL *out, const REAL *inp, const REAL *w, const REAL *bias, int N,
                        int C, int OC) {
  OPN(fb_gemm)(CblasNoTrans, CblasTrans, N, OC, C, (REAL)1, inp, C, w, C, (REAL)0, out,
         OC);
  if (!bias) return;
#pragma omp parallel for schedule(static) if ((int64_t)N * OC > EW_BLOCK)
  for (int n = 0; n < N; n++) {
    REAL *o = out + (int64_t)n * OC;
    for (int j = 0; j < OC; j++) o[j] += bias[j];
  }
}

void OPN(fb_matmul_bwd)(REAL *dinp, REAL *dw, REAL *dbias, const REAL *dout, const REAL *inp,
                        const REAL *w, int N, int C, int OC) {
  if (dinp)
    OPN(fb_gemm)(CblasNoTrans, CblasNoTrans, N, C, OC, (REAL)1, dout, OC, w, C,
           (REAL)0, dinp, C);
  OPN(fb_gemm)(CblasTrans, CblasNoTrans, OC, C, N, (REAL)1, dout, OC, inp, C, (REAL)1,
         dw, C);
  if (!dbias) return;
  int ncb = (OC + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if ((int64_t)N * OC > EW_BLOCK)
  for (int cb = 0; cb < ncb; cb++) {
    int c0 = cb * COL_BLOCK, c1 = c0 + COL_BLOCK < OC ? c0 + COL_BLOCK : OC;
    for (int n = 0; n < N; n++) {
      const REAL *d = dout + (int64_t)n * OC;
      for (int c = c0; c < c1; c++) dbias[c] += d[c];
    }
  }
}

/* ---- causal grouped-query attention ----------------------------------------------------
 * Flash-attention style on the CPU: per (b, h) and per block of ATT_BQ queries, the scores of
 * the block against keys [0, i1) are one GEMM, softmax runs row by row (causal mask), and
 * P @ V is a second GEMM written straight into out. Only lse = m + log(sum exp(s - m)) of
 * each query is kept. Backward works per (b, kv head) so the heads sharing a kv head add
 * into dk/dv from one thread, in head order; it recomputes P = exp(s - lse) block by block. */
static int LOC(attn_threads)(void) {
  int nt = omp_get_max_threads(), slots = fb_ops_attn_slots();
  return nt < slots ? nt : slots;
}

void OPN(fb_attention_fwd)(REAL *out, REAL *lse, const REAL *q, const REAL *k, const REAL *v,
                           int B, int T, int H, int KVH, int hd, int ldq, int ldkv,
                           REAL *scratch) {
  assert(H % KVH == 0 && ldq >= H * hd && ldkv >= KVH * hd);
  const int group = H / KVH, ldo = H * hd;
  const REAL scale = (REAL)1 / R_SQRT((REAL)hd);
  const size_t per_slot = fb_ops_attn_scratch_elems(T);
  const int ntask = B * H;
#pragma omp parallel for schedule(static) num_threads(LOC(attn_threads)())
  for (int task = 0; task < ntask; task++) {
    int b = task / H, h = task % H, kh = h / group;
    REAL *S = scratch + (size_t)omp_get_thread_num() * per_slot;
    const REAL *qb = q + (int64_t)b * T * ldq + h * hd;
    const REAL *kb = k + (int64_t)b * T * ldkv + kh * hd;
    const REAL *vb = v + (int64_t)b * T * ldkv + kh * hd;
    REAL *ob = out + (int64_t)b * T * ldo + h * hd;
    REAL *lb = lse + ((int64_t)b * H + h) * T;
    for (int i0 = 0; i0 < T; i0 += ATT_BQ) {
      int nq = T - i0 < ATT_BQ ? T - i0 : ATT_BQ, i1 = i0 + nq;
      R_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nq, i1, hd, scale, qb + (int64_t)i0 * ldq,
             ldq, kb, ldkv, (REAL)0, S, i1);
      for (int r = 0; r < nq; r++) {
        REAL *s = S + (size_t)r * i1;
        int nk = i0 + r + 1; /* keys 0..t */
        REAL m = s[0];
        for (int j = 1; j < nk; j++) m = s[j] > m ? s[j] : m;
        for (int j = 0; j < nk; j++) s[j] = R_EXP(s[j] - m);
        REAL sum = LOC(rsum)(s, nk), inv = (REAL)1 / sum;
        for (int j = 0; j < nk; j++) s[j] *= inv;
        for (int j = nk; j < i1; j++) s[j] = 0;
        lb[i0 + r] = m + R_LOG(sum);
      }
      R_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hd, i1, (REAL)1, S, i1, vb, ldkv,
             (REAL)0, ob + (int64_t)i0 * ldo, ldo);
    }
  }
}

void OPN(fb_attention_bwd)(REAL *dq, REAL *dk, REAL *dv, const REAL *dout, const REAL *q,
                           const REAL *k, const REAL *v, const REAL *out, const REAL *lse, int B,
                           int T, int H, int KVH, int hd, int ldq, int ldkv, REAL *scratch) {
  assert(H % KVH == 0 && ldq >= H * hd && ldkv >= KVH * hd);
  const int group = H / KVH, ldo = H * hd;
  const REAL scale = (REAL)1 / R_SQRT((REAL)hd);
  const size_t per_slot = fb_ops_attn_scratch_elems(T);
  const int ntask = B * KVH;
#pragma omp parallel for schedule(static) num_threads(LOC(attn_threads)())
  for (int task = 0; task < ntask; task++) {
    int b = task / KVH, kh = task % KVH;
    int bq = T < ATT_BQ ? T : ATT_BQ;
    REAL *P = scratch + (size_t)omp_get_thread_num() * per_slot;
    REAL *dP = P + (size_t)bq * T, *D = dP + (size_t)bq * T;
    const REAL *kb = k + (int64_t)b * T * ldkv + kh * hd;
    const REAL *vb = v + (int64_t)b * T * ldkv + kh * hd;
    REAL *dkb = dk + (int64_t)b * T * ldkv + kh * hd;
    REAL *dvb = dv + (int64_t)b * T * ldkv + kh * hd;
    for (int t = 0; t < T; t++)
      for (int d = 0; d < hd; d++) dkb[(int64_t)t * ldkv + d] = dvb[(int64_t)t * ldkv + d] = 0;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
      const REAL *qb = q + (int64_t)b * T * ldq + h * hd;
      REAL *dqb = dq + (int64_t)b * T * ldq + h * hd;
      const REAL *ob = out + (int64_t)b * T * ldo + h * hd;
      const REAL *dob = dout + (int64_t)b * T * ldo + h * hd;
      const REAL *lb = lse + ((int64_t)b * H + h) * T;
      for (int i0 = 0; i0 < T; i0 += ATT_BQ) {
        int nq = T - i0 < ATT_BQ ? T - i0 : ATT_BQ, i1 = i0 + nq;
        const REAL *qi = qb + (int64_t)i0 * ldq, *doi = dob + (int64_t)i0 * ldo;
        R_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nq, i1, hd, scale, qi, ldq, kb, ldkv,
               (REAL)0, P, i1);
        for (int r = 0; r < nq; r++) {
          REAL *p = P + (size_t)r * i1, l = lb[i0 + r];
          int nk = i0 + r + 1;
          for (int j = 0; j < nk; j++) p[j] = R_EXP(p[j] - l);
          for (int j = nk; j < i1; j++) p[j] = 0;
          D[r] = LOC(rdot)(doi + (int64_t)r * ldo, ob + (int64_t)(i0 + r) * ldo, hd);
        }
        /* dV[0:i1] += P^T dO */
        R_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hd, nq, (REAL)1, P, i1, doi, ldo,
               (REAL)1, dvb, ldkv);
        /* dP = dO V^T, then dS = P * (dP - D) * scale in place */
        R_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nq, i1, hd, (REAL)1, doi, ldo, vb, ldkv,
               (REAL)0, dP, i1);
        for (int r = 0; r < nq; r++) {
          REAL *p = P + (size_t)r * i1, *ds = dP + (size_t)r * i1, Dr = D[r];
          for (int j = 0; j < i1; j++) ds[j] = p[j] * (ds[j] - Dr) * scale;
        }
        /* dQ block = dS K (overwrites), dK[0:i1] += dS^T Q */
        R_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hd, i1, (REAL)1, dP, i1, kb, ldkv,
               (REAL)0, dqb + (int64_t)i0 * ldq, ldq);
        R_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hd, nq, (REAL)1, dP, i1, qi, ldq,
               (REAL)1, dkb, ldkv);
      }
    }
  }
}

/* ---- rotary embedding ("rotate half") --------------------------------------------------- */
static void LOC(rope)(REAL *x, int B, int T, int nh, int hd, int ld, double theta, int inverse) {
  assert(hd % 2 == 0 && hd <= 1024 && ld >= nh * hd);
  int half = hd / 2;
  double freq[512];
  for (int i = 0; i < half; i++) freq[i] = pow(theta, -2.0 * i / hd);
  int64_t N = (int64_t)B * T;
#pragma omp parallel for schedule(static) if (N * nh * hd > EW_BLOCK)
  for (int64_t n = 0; n < N; n++) {
    int t = (int)(n % T);
    REAL cs[512], sn[512];
    for (int i = 0; i < half; i++) {
      double a = t * freq[i];
      cs[i] = (REAL)cos(a);
      sn[i] = inverse ? (REAL)-sin(a) : (REAL)sin(a);
    }
    for (int h = 0; h < nh; h++) {
      REAL *r = x + n * ld + (int64_t)h * hd;
      for (int i = 0; i < half; i++) {
        REAL x1 = r[i], x2 = r[i + half];
        r[i] = x1 * cs[i] - x2 * sn[i];
        r[i + half] = x1 * sn[i] + x2 * cs[i];
      }
    }
  }
}
void OPN(fb_rope_fwd)(REAL *x, int B, int T, int nh, int hd, int ld, double theta) {
  LOC(rope)(x, B, T, nh, hd, ld, theta, 0);
}
/* The rotation is orthogonal: its transpose (the inverse rotation) maps dy to dx. */
void OPN(fb_rope_bwd)(REAL *dx, int B, int T, int nh, int hd, int ld, double theta) {
  LOC(rope)(dx, B, T, nh, hd, ld, theta, 1);
}

/* ---- elementwise: fixed EW_BLOCK blocks, so the split never depends on the thread count -- */
#define EW_FOR(n, i, ...)                                                                      \
  do {                                                                                         \
    int64_t ew_nb_ = (int64_t)(((n) + EW_BLOCK - 1) / EW_BLOCK);                               \
    _Pragma("omp parallel for schedule(static) if (ew_nb_ > 1)")                               \
    for (int64_t ew_b_ = 0; ew_b_ < ew_nb_; ew_b_++) {                                         \
      size_t ew_i1_ = LOC(min_sz)((size_t)(ew_b_ + 1) * EW_BLOCK, (n));                        \
      for (size_t i = (size_t)ew_b_ * EW_BLOCK; i < ew_i1_; i++) { __VA_ARGS__; }              \
    }                                                                                          \
  } while (0)

void OPN(fb_gelu_fwd)(REAL *out, const REAL *inp, size_t n) {
  EW_FOR(n, i, out[i] = R_GELU(inp[i]));
}
void OPN(fb_gelu_bwd)(REAL *dinp, const REAL *inp, const REAL *dout, size_t n) {
  EW_FOR(n, i, dinp[i] = dout[i] * R_GELU_GRAD(inp[i]));
}
void OPN(fb_swiglu_fwd)(REAL *out, const REAL *a, const REAL *b, size_t n) {
  EW_FOR(n, i, out[i] = R_SWIGLU(a[i], b[i]));
}
void OPN(fb_swiglu_bwd)(REAL *da, REAL *db, const REAL *dout, const REAL *a, const REAL *b,
                        size_t n) {
  EW_FOR(n, i, {
    REAL ga, gb;
    R_SWIGLU_GRAD(a[i], b[i], dout[i], &ga, &gb);
    da[i] = ga;
    db[i] = gb;
  });
}
void OPN(fb_add)(REAL *out, const REAL *a, const REAL *b, size_t n) {
  EW_FOR(n, i, out[i] = a[i] + b[i]);
}
void OPN(fb_acc)(REAL *y, const REAL *x, size_t n) { EW_FOR(n, i, y[i] += x[i]); }
void OPN(fb_scale)(REAL *y, REAL a, size_t n) { EW_FOR(n, i, y[i] *= a); }

/* R_ADAMW_BLOCK(p, g, m, v, n, a), when defined, updates one block with the same formula in
 * explicit vector code (the compiler does not vectorise sqrt under -fmath-errno); every element
 * must go through it, tails included, so shards of a tensor round as the whole tensor does. */
void OPN(fb_adamw)(REAL *p, const REAL *g, REAL *m, REAL *v, size_t n, const fb_adamw_args *a) {
#ifdef R_ADAMW_BLOCK
  int64_t nb = (int64_t)((n + EW_BLOCK - 1) / EW_BLOCK);
#pragma omp parallel for schedule(static) if (nb > 1)
  for (int64_t b = 0; b < nb; b++) {
    size_t i0 = (size_t)b * EW_BLOCK;
    R_ADAMW_BLOCK(p + i0, g + i0, m + i0, v + i0, LOC(min_sz)(n - i0, EW_BLOCK), a);
  }
#else
  const REAL lr = a->lr, b1 = a->beta1, b2 = a->beta2, eps = a->eps, wd = a->weight_decay;
  const REAL bc1 = a->bias_corr1, bc2 = a->bias_corr2, gs = a->grad_scale;
  EW_FOR(n, i, R_ADAMW(&p[i], g[i], &m[i], &v[i], lr, b1, b2, eps, wd, bc1, bc2, gs));
#endif
}
void OPN(fb_sgd)(REAL *p, const REAL *g, REAL *mom, size_t n, const fb_sgd_args *a) {
  const REAL lr = a->lr, mu = a->momentum, wd = a->weight_decay, gs = a->grad_scale;
  if (mom) {
    EW_FOR(n, i, R_SGD(&p[i], g[i], &mom[i], lr, mu, wd, gs));
  } else { /* plain SGD: no momentum buffer */
    EW_FOR(n, i, {
      REAL zero = 0;
      R_SGD(&p[i], g[i], &zero, lr, (REAL)0, wd, gs);
    });
  }
}

/* ---- softmax cross-entropy, in place ---------------------------------------------------- */
#define XENT_ROWS 512 /* rows per parallel pass; their losses are then summed in row order */
void OPN(fb_xent_fwd_bwd)(REAL *logits, double *loss_sum, const int32_t *targets, int N, int V,
                          int ld, REAL dscale) {
  double row_loss[XENT_ROWS];
  for (int r0 = 0; r0 < N; r0 += XENT_ROWS) {
    int nr = N - r0 < XENT_ROWS ? N - r0 : XENT_ROWS;
#pragma omp parallel for schedule(static) if ((int64_t)nr * V > EW_BLOCK)
    for (int r = 0; r < nr; r++) {
      REAL *x = logits + (int64_t)(r0 + r) * ld;
      int tgt = targets[r0 + r];
      for (int j = V; j < ld; j++) x[j] = 0; /* padding: no gradient */
      if (tgt < 0) {
        for (int j = 0; j < V; j++) x[j] = 0;
        row_loss[r] = 0;
        continue;
      }
      assert(tgt < V);
      REAL m8[8];
      for (int j = 0; j < 8; j++) m8[j] = x[0];
      int j = 0;
      for (; j + 8 <= V; j += 8)
        for (int l = 0; l < 8; l++) m8[l] = x[j + l] > m8[l] ? x[j + l] : m8[l];
      for (int l = 0; j < V; j++, l++) m8[l] = x[j] > m8[l] ? x[j] : m8[l];
      REAL m = m8[0];
      for (int l = 1; l < 8; l++) m = m8[l] > m ? m8[l] : m;
      REAL xt = x[tgt];
      for (j = 0; j < V; j++) x[j] = R_EXP(x[j] - m);
      REAL sum = LOC(rsum)(x, V), f = dscale / sum;
      for (j = 0; j < V; j++) x[j] *= f;
      x[tgt] -= dscale;
      row_loss[r] = ((double)m + log((double)sum)) - (double)xt;
    }
    for (int r = 0; r < nr; r++) loss_sum[0] += row_loss[r];
  }
}

/* ---- fp64 sum in index order --------------------------------------------------------- */
void OPN(fb_sum_f64)(double *out, const REAL *x, size_t n) {
  double s = out[0];
  for (size_t i = 0; i < n; i++) s += (double)x[i];
  out[0] = s;
}

#undef EW_FOR
#undef XENT_ROWS
#undef EW_BLOCK
#undef COL_BLOCK
#undef ATT_BQ
