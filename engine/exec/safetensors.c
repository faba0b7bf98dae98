/* safetensors writer and loader (safetensors.h). */
#define _GNU_SOURCE
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/files.h"

bool fb_is_safetensors(const char *path) {
  size_t n = strlen(path), k = strlen(".safetensors");
  return n > k && !strcmp(path + n - k, ".safetensors");
}

/* GPT-2's Conv1D weights, stored [in, out] by transformers. */
static bool conv1d(const fb_model *m, const fb_param *p) {
  return m->spec.family == FB_GPT2 && p->cols > 1 && strstr(p->name, "h.") == p->name;
}

static void export_name(const fb_model *m, const fb_param *p, char *out, size_t n) {
  if (m->spec.family != FB_GPT2) snprintf(out, n, "%s", p->name);
  else if (!strcmp(p->name, "wte") || !strcmp(p->name, "wpe")) snprintf(out, n, "transformer.%s.weight", p->name);
  else snprintf(out, n, "transformer.%s", p->name);
}

/* The tensor as stored: [rows, cols] or, for Conv1D, its transpose. */
static void to_file(const fb_model *m, const fb_param *p, const float *src, float *dst) {
  if (!conv1d(m, p)) {
    memcpy(dst, src, (size_t)p->numel * 4);
    return;
  }
  for (int64_t i = 0; i < p->rows; i++)
    for (int64_t j = 0; j < p->cols; j++) dst[j * p->rows + i] = src[i * p->cols + j];
}

static void from_file(const fb_model *m, const fb_param *p, const float *src, float *dst) {
  if (!conv1d(m, p)) {
    memcpy(dst, src, (size_t)p->numel * 4);
    return;
  }
  for (int64_t i = 0; i < p->rows; i++)
    for (int64_t j = 0; j < p->cols; j++) dst[i * p->cols + j] = src[j * p->rows + i];
}

static int shape(const fb_model *m, const fb_param *p, char *buf, size_t n) {
  if (p->cols == 1) return snprintf(buf, n, "[%lld]", (long long)p->rows);
  return conv1d(m, p) ? snprintf(buf, n, "[%lld,%lld]", (long long)p->cols, (long long)p->rows)
                      : snprintf(buf, n, "[%lld,%lld]", (long long)p->rows, (long long)p->cols);
}

/* The JSON header, padded with spaces to a multiple of 8 bytes (as the format recommends). */
static char *header(const fb_model *m, const char *note, size_t *len) {
  char *h = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&h, &n);
  if (!f) return NULL;
  fprintf(f, "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"fsdpbench\",\"note\":\"%s\"}", note);
  int64_t off = 0;
  for (int i = 0; i < m->nparams; i++) {
    const fb_param *p = &m->params[i];
    char name[96], shp[64];
    export_name(m, p, name, sizeof name);
    shape(m, p, shp, sizeof shp);
    fprintf(f, ",\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%lld,%lld]}", name, shp,
            (long long)off, (long long)(off + p->numel * 4));
    off += p->numel * 4;
  }
  fputc('}', f);
  while ((ftell(f) % 8) != 0) fputc(' ', f);
  if (fclose(f)) {
    free(h);
    return NULL;
  }
  *len = n;
  return h;
}

fb_status fb_safetensors_write(const char *path, const fb_model *m, float *const *unit_src,
                               const char *note) {
  size_t hl = 0;
  char *h = header(m, note, &hl);
  if (!h) return FB_ERR(FB_ENOMEM, "export: out of host memory");
  fb_out_file out; /* written under a temporary name, renamed when complete */
  fb_status st = fb_out_open(&out, path, "export");
  if (st != FB_OK) {
    free(h);
    return st;
  }
  FILE *f = out.f;
  uint64_t len = hl;
  bool ok = fwrite(&len, 8, 1, f) == 1 && fwrite(h, 1, hl, f) == hl;
  free(h);
  float *buf = NULL;
  for (int i = 0; i < m->nparams && ok; i++) {
    const fb_param *p = &m->params[i];
    float *t = realloc(buf, (size_t)p->numel * 4 + 4);
    if (!t) { ok = false; break; }
    buf = t;
    to_file(m, p, unit_src[p->unit] + p->offset, buf);
    ok = fwrite(buf, 4, (size_t)p->numel, f) == (size_t)p->numel;
  }
  free(buf);
  if (!ok) {
    st = FB_ERR(FB_EIO, "export: writing %s: %s", path, strerror(errno));
    fb_out_discard(&out);
    return st;
  }
  FB_TRY(fb_out_commit(&out));
  return FB_OK;
}

/* ---- load ---------------------------------------------------------------------------------- */

/* Finds tensor `name` in the header: its dtype and data offsets. */
static bool find_tensor(const char *hdr, const char *name, char *dtype, long long *a, long long *b) {
  char key[128];
  snprintf(key, sizeof key, "\"%s\"", name);
  for (const char *p = strstr(hdr, key); p; p = strstr(p + 1, key)) {
    const char *q = p + strlen(key);
    while (*q == ' ') q++;
    if (*q != ':') continue;
    const char *end = strchr(q, '}');
    const char *dt = strstr(q, "\"dtype\""), *off = strstr(q, "\"data_offsets\"");
    if (!end || !dt || !off || dt > end || off > end) return false;
    /* a space in a scanf format matches any run of white space, none included */
    return sscanf(dt, "\"dtype\" : \"%7[^\"]\"", dtype) == 1 &&
           sscanf(off, "\"data_offsets\" : [ %lld , %lld ]", a, b) == 2;
  }
  return false;
}

/* The whole model's parameters from the file into host unit buffers. */
static fb_status read_model(const fb_model *m, const char *path, float **unit) {
  FILE *f = fopen(path, "rb");
  if (!f) return FB_ERR(FB_EUSAGE, "--init-from: cannot read '%s': %s", path, strerror(errno));
  struct stat sb;
  uint64_t hl = 0;
  fb_status st = FB_OK;
  if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode) || fread(&hl, 8, 1, f) != 1 ||
      hl > (uint64_t)sb.st_size - 8 || hl > (100u << 20))
    st = FB_ERR(FB_EUSAGE, "--init-from: '%s' is not a safetensors file", path);
  char *hdr = st == FB_OK ? calloc(hl + 1, 1) : NULL;
  if (st == FB_OK && (!hdr || fread(hdr, 1, hl, f) != hl))
    st = FB_ERR(FB_EUSAGE, "--init-from: '%s': truncated header", path);
  float *buf = NULL;
  for (int i = 0; i < m->nparams && st == FB_OK; i++) {
    const fb_param *p = &m->params[i];
    char name[96], dtype[8] = "";
    long long a = 0, b = 0;
    export_name(m, p, name, sizeof name);
    if (!find_tensor(hdr, name, dtype, &a, &b))
      st = FB_ERR(FB_EUSAGE, "--init-from: '%s' has no tensor %s", path, name);
    else if (strcmp(dtype, "F32") || b - a != p->numel * 4 || a < 0 ||
             (uint64_t)b > (uint64_t)sb.st_size - 8 - hl)
      st = FB_ERR(FB_EUSAGE, "--init-from: '%s': tensor %s is %s of %lld bytes (want F32, %lld)",
                  path, name, dtype, b - a, (long long)(p->numel * 4));
    float *t = st == FB_OK ? realloc(buf, (size_t)p->numel * 4 + 4) : NULL;
    if (st == FB_OK && !t) st = FB_ERR(FB_ENOMEM, "out of host memory");
    if (st != FB_OK) break;
    buf = t;
    if (fseeko(f, (off_t)(8 + hl + (uint64_t)a), SEEK_SET) || fread(buf, 4, (size_t)p->numel, f) != (size_t)p->numel)
      st = FB_ERR(FB_EUSAGE, "--init-from: '%s': tensor %s is truncated", path, name);
    else
      from_file(m, p, buf, unit[p->unit] + p->offset);
  }
  free(buf);
  free(hdr);
  fclose(f);
  return st;
}

fb_status fb_safetensors_load(fb_rank *r, const char *path) {
  if (!r->strategy->state_ranges)
    return FB_ERR(FB_EUNSUPPORTED, "--init-from: strategy %s cannot load a state", r->strategy->name);
  const fb_model *m = r->model;
  float **unit = calloc((size_t)m->nunits, sizeof *unit);
  fb_status st = unit ? FB_OK : FB_ERR(FB_ENOMEM, "out of host memory");
  for (int u = 0; u < m->nunits && st == FB_OK; u++)
    if (!(unit[u] = calloc((size_t)m->units[u].numel + 1, sizeof **unit)))
      st = FB_ERR(FB_ENOMEM, "out of host memory");
  if (st == FB_OK) st = read_model(m, path, unit);
  fb_state_range *v = NULL;
  int n = 0;
  if (st == FB_OK) st = r->strategy->state_ranges(r, false, &v, &n);
  for (int i = 0; i < n && st == FB_OK; i++)
    st = fb_copy_h2d(r->dev, r->compute, v[i].p, unit[v[i].unit] + v[i].start, (size_t)v[i].n * 4);
  if (st == FB_OK) st = fb_stream_sync(r->dev, r->compute);
  if (st == FB_OK && r->strategy->state_loaded) st = r->strategy->state_loaded(r);
  free(v);
  for (int u = 0; unit && u < m->nunits; u++) free(unit[u]);
  free(unit);
  return st;
}
