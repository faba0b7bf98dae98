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

#include "files.h"

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

/* Outputs are written under a temporary name and renamed into place on a clean close
 * (files.h), so a full disk never leaves a truncated file where a tool would read it, and a
 * destination that is not a regular file is refused, never replaced. The FILE is what callers
 * hold; the table finds its fb_out_file again on close. */
enum { NPENDING = 64 };
static fb_out_file open_files[NPENDING];
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;

fb_status fb_json_open(const char *dir, const char *name, FILE **out) {
  char path[4096];
  int len = snprintf(path, sizeof path, "%s/%s", dir, name);
  if (len < 0 || (size_t)len >= sizeof path)
    return FB_ERR(FB_EUSAGE, "--out: path too long: '%s/%s'", dir, name);
  fb_out_file o;
  FB_TRY(fb_out_open(&o, path, "--out"));
  pthread_mutex_lock(&open_mu);
  fb_out_file *slot = NULL;
  for (int i = 0; i < NPENDING && !slot; i++)
    if (!open_files[i].f) slot = &open_files[i];
  if (slot) *slot = o;
  pthread_mutex_unlock(&open_mu);
  if (!slot) {
    fb_out_discard(&o);
    return FB_ERR(FB_EIO, "cannot write '%s': too many open outputs", path);
  }
  setvbuf(o.f, NULL, _IOFBF, 1 << 20);
  *out = o.f;
  return FB_OK;
}

/* Takes f's entry out of the table (o->f stays NULL when f was not opened here). */
static void take(FILE *f, fb_out_file *o) {
  memset(o, 0, sizeof *o);
  pthread_mutex_lock(&open_mu);
  for (int i = 0; i < NPENDING; i++)
    if (open_files[i].f == f) {
      *o = open_files[i];
      open_files[i].f = NULL;
    }
  pthread_mutex_unlock(&open_mu);
}

void fb_json_discard(FILE *f) {
  fb_out_file o;
  take(f, &o);
  if (o.f) fb_out_discard(&o);
  else fclose(f);
}

fb_status fb_json_close(FILE *f, const char *what) {
  fb_out_file o;
  take(f, &o);
  if (!o.f) { /* not opened by fb_json_open: close it as it is */
    int bad = ferror(f) || fclose(f) != 0;
    return bad ? FB_ERR(FB_EIO, "write error on '%s' (disk full?)", what) : FB_OK;
  }
  return fb_out_commit(&o);
}
