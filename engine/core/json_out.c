/* JSON output helpers (json_out.h): escaping, finite-safe numbers, mkdir -p, buffered files.
 * Nothing here builds a document tree; writers stream their output directly. */
#include "json_out.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/stat.h>

void fb_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\r': fputs("\\r", f); break;
    case '\t': fputs("\\t", f); break;
    case '\b': fputs("\\b", f); break;
    case '\f': fputs("\\f", f); break;
    default:
      if (*p < 0x20) fprintf(f, "\\u%04x", *p);
      else fputc(*p, f);
    }
  }
  fputc('"', f);
}

void fb_json_num(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, "%.17g", x);
  else fputs("null", f);
}

void fb_json_fixed(FILE *f, double x, int prec) {
  if (isfinite(x)) fprintf(f, "%.*f", prec, x);
  else fputs("null", f);
}

void fb_json_int(FILE *f, int64_t x) { fprintf(f, "%" PRId64, x); }

fb_status fb_mkdir_p(const char *dir) {
  if (!dir || !*dir) return FB_ERR(FB_EUSAGE, "--out: empty directory name");
  size_t n = strlen(dir);
  char *p = malloc(n + 1);
  if (!p) return FB_ERR(FB_ENOMEM, "out of host memory");
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char c = p[i];
    p[i] = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      int e = errno;
      fb_status st = FB_ERR(FB_EIO, "--out: cannot create directory '%s': %s", p, strerror(e));
      free(p);
      return st;
    }
    p[i] = c;
  }
  free(p);
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return FB_ERR(FB_EIO, "--out: '%s' exists and is not a directory", dir);
  return FB_OK;
}

/* Outputs are written under a temporary name and renamed into place on a clean close, so a
 * full disk never leaves a truncated file where a tool would read it. */
typedef struct pending {
  FILE *f;
  char tmp[4096], path[4096];
} pending;
enum { NPENDING = 64 };
static pending open_files[NPENDING];
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;

fb_status fb_json_open(const char *dir, const char *name, FILE **out) {
  char path[4096], tmp[4096];
  int len = snprintf(path, sizeof path, "%s/%s", dir, name);
  int tl = snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
  if (len < 0 || (size_t)len >= sizeof path || tl < 0 || (size_t)tl >= sizeof tmp)
    return FB_ERR(FB_EUSAGE, "--out: path too long: '%s/%s'", dir, name);
  pthread_mutex_lock(&open_mu);
  pending *slot = NULL;
  for (int i = 0; i < NPENDING && !slot; i++)
    if (!open_files[i].f) slot = &open_files[i];
  FILE *f = slot ? fopen(tmp, "w") : NULL;
  if (f) {
    slot->f = f;
    snprintf(slot->tmp, sizeof slot->tmp, "%s", tmp);
    snprintf(slot->path, sizeof slot->path, "%s", path);
  }
  pthread_mutex_unlock(&open_mu);
  if (!f) return FB_ERR(FB_EIO, "cannot write '%s': %s", tmp, slot ? strerror(errno) : "too many open outputs");
  setvbuf(f, NULL, _IOFBF, 1 << 20);
  *out = f;
  return FB_OK;
}

fb_status fb_json_close(FILE *f, const char *what) {
  pending p = {0};
  pthread_mutex_lock(&open_mu);
  for (int i = 0; i < NPENDING; i++)
    if (open_files[i].f == f) {
      p = open_files[i];
      open_files[i].f = NULL;
    }
  pthread_mutex_unlock(&open_mu);
  int bad = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
  if (fclose(f) != 0) bad = 1;
  if (!bad && p.f && rename(p.tmp, p.path) != 0) bad = 1;
  if (bad && p.f) unlink(p.tmp);
  if (bad) return FB_ERR(FB_EIO, "write error on '%s' (disk full?): nothing was written there", what);
  return FB_OK;
}
