/* `fsdpbench trace-merge` (trace_merge.h): reads every input whole, checks it with the JSON
 * scanner (json_scan.h), then streams the output: each event object member by member, "ts"
 * rewritten on the common clock, everything else copied byte for byte. Timestamps are parsed
 * as decimal microseconds into integer nanoseconds, so a shift never rounds (inputs written
 * by fsdpbench carry 3 decimals). It does not write traces of runs (traces/chrome_trace.c). */
#include "trace_merge.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/core/files.h"
#include "../engine/core/json_out.h"
#include "../engine/core/status.h"
#include "common/json_scan.h"

#define WANT "a Chrome trace written by fsdpbench --trace"

typedef struct input {
  const char *path;
  char *text;
  size_t len;
  const char *other, *other_end;   /* otherData value */
  const char *events, *events_end; /* traceEvents value */
  int64_t origin_ns;               /* otherData.trace_origin_unix_ns */
  int64_t *ranks;
  int nranks;
} input;

static void input_free(input *in) {
  free(in->text);
  free(in->ranks);
  memset(in, 0, sizeof *in);
}

static fb_status read_all(input *in) {
  FB_TRY(fb_check_input(in->path, "trace-merge", WANT));
  FILE *f = fopen(in->path, "rb");
  if (!f) return FB_ERR(FB_EUSAGE, "trace-merge: cannot read '%s': %s", in->path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    char *nb = realloc(buf, cap * 2);
    if (!nb) free(buf);
    buf = nb;
    cap *= 2;
  }
  bool err = ferror(f);
  fclose(f);
  if (!buf) return FB_ERR(FB_ENOMEM, "trace-merge: out of host memory reading '%s'", in->path);
  if (err) {
    free(buf);
    return FB_ERR(FB_EIO, "trace-merge: read error on '%s'", in->path);
  }
  in->text = buf;
  in->len = n;
  return FB_OK;
}

static fb_status not_trace(const input *in, const char *why) {
  return FB_ERR(FB_EUSAGE, "trace-merge: '%s' is not %s: %s", in->path, WANT, why);
}

/* otherData.ranks (non-empty, ranks >= 0) and otherData.trace_origin_unix_ns. */
static fb_status read_other(input *in) {
  fb_js_iter it;
  const char *k, *v, *ve, *ranks = NULL, *ranks_end = NULL;
  size_t kl;
  bool have_origin = false;
  int rc;
  if (!fb_js_open(&it, in->other, in->other_end, true))
    return not_trace(in, "otherData is not an object");
  while ((rc = fb_js_next(&it, &k, &kl, &v, &ve)) == 1) {
    if (fb_js_key_is(k, kl, "trace_origin_unix_ns")) {
      /* a wall-clock time: >= 0, and small enough that no shift can overflow */
      if (!fb_js_int64(v, ve, &in->origin_ns) || in->origin_ns < 0 ||
          in->origin_ns > INT64_MAX / 2)
        return not_trace(in, "otherData.trace_origin_unix_ns is not a time in ns since 1970");
      have_origin = true;
    } else if (fb_js_key_is(k, kl, "ranks")) {
      ranks = v;
      ranks_end = ve;
    }
  }
  if (rc < 0) return not_trace(in, "otherData is not valid JSON");
  if (!have_origin)
    return not_trace(in, "otherData has no trace_origin_unix_ns (written by an older fsdpbench?)");
  if (!ranks || !fb_js_open(&it, ranks, ranks_end, false))
    return not_trace(in, "otherData has no ranks list");
  while ((rc = fb_js_next(&it, NULL, NULL, &v, &ve)) == 1) {
    int64_t r;
    if (!fb_js_int64(v, ve, &r) || r < 0) return not_trace(in, "otherData.ranks holds a non-rank");
    int64_t *nr = realloc(in->ranks, (size_t)(in->nranks + 1) * sizeof *nr);
    if (!nr) return FB_ERR(FB_ENOMEM, "trace-merge: out of host memory");
    in->ranks = nr;
    in->ranks[in->nranks++] = r;
  }
  if (rc < 0 || in->nranks == 0) return not_trace(in, "otherData.ranks is empty or malformed");
  return FB_OK;
}

/* The whole text is one JSON object with otherData and a traceEvents list. */
static fb_status parse_input(input *in) {
  FB_TRY(read_all(in));
  const char *end = in->text + in->len;
  const char *top_end = fb_js_skip(in->text, end);
  if (!top_end || fb_js_ws(top_end, end) != end) return not_trace(in, "not valid JSON");
  fb_js_iter it;
  const char *k, *v, *ve;
  size_t kl;
  if (!fb_js_open(&it, in->text, end, true)) return not_trace(in, "the top level is not an object");
  while (fb_js_next(&it, &k, &kl, &v, &ve) == 1) {
    if (fb_js_key_is(k, kl, "otherData")) {
      in->other = v;
      in->other_end = ve;
    } else if (fb_js_key_is(k, kl, "traceEvents")) {
      in->events = v;
      in->events_end = ve;
    }
  }
  if (!in->events || *in->events != '[') return not_trace(in, "no traceEvents list");
  if (!in->other) return not_trace(in, "no otherData (written by an older fsdpbench?)");
  /* every event an object: the output is then written without a failure half-way */
  fb_js_open(&it, in->events, in->events_end, false);
  int rc;
  fb_js_iter ev;
  while ((rc = fb_js_next(&it, NULL, NULL, &v, &ve)) == 1)
    if (!fb_js_open(&ev, v, ve, true)) return not_trace(in, "an event is not an object");
  if (rc < 0) return not_trace(in, "traceEvents is malformed");
  return read_other(in);
}

static fb_status check_ranks(const input *in, int n) {
  for (int a = 0; a < n; a++)
    for (int i = 0; i < in[a].nranks; i++)
      for (int b = a; b < n; b++)
        for (int j = b == a ? i + 1 : 0; j < in[b].nranks; j++)
          if (in[a].ranks[i] == in[b].ranks[j])
            return FB_ERR(FB_EUSAGE, "trace-merge: rank %lld is in both '%s' and '%s' (want each "
                          "rank in one input)", (long long)in[a].ranks[i], in[a].path, in[b].path);
  return FB_OK;
}

/* Decimal microseconds [v, ve) to integer nanoseconds: exact up to 3 decimals, rounded beyond;
 * exponent forms go through strtod. False when it is not a number. */
static bool us_to_ns(const char *v, const char *ve, int64_t *out) {
  const char *p = v;
  bool neg = p < ve && *p == '-';
  if (neg) p++;
  int64_t whole = 0, frac = 0;
  int nd = 0, digits = 0;
  for (; p < ve && *p >= '0' && *p <= '9'; p++, digits++) {
    if (whole > (INT64_MAX / 1000 - 9) / 10) return false;
    whole = whole * 10 + (*p - '0');
  }
  if (p < ve && *p == '.') {
    for (p++; p < ve && *p >= '0' && *p <= '9'; p++, nd++) {
      if (nd < 3) frac = frac * 10 + (*p - '0');
      else if (nd == 3 && *p >= '5') frac++;
    }
  }
  if (p < ve || digits == 0) {
    char buf[64];
    size_t len = (size_t)(ve - v);
    if (len >= sizeof buf) return false;
    memcpy(buf, v, len);
    buf[len] = '\0';
    char *e;
    double x = strtod(buf, &e);
    if (*e || !isfinite(x) || fabs(x) > 9e12) return false;
    *out = llround(x * 1000);
    return true;
  }
  for (int i = nd; i < 3; i++) frac *= 10;
  *out = (neg ? -1 : 1) * (whole * 1000 + frac);
  return true;
}

static void put_us(FILE *f, int64_t ns) {
  if (ns < 0) {
    fputc('-', f);
    ns = -ns;
  }
  fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

/* One event: copied as it is, "ts" shifted by shift_ns. */
static fb_status put_event(FILE *f, const input *in, const char *v, const char *ve,
                           int64_t shift_ns) {
  fb_js_iter it;
  if (!fb_js_open(&it, v, ve, true)) return not_trace(in, "an event is not an object");
  const char *k, *mv, *mve;
  size_t kl;
  int rc;
  bool first = true;
  fputc('{', f);
  while ((rc = fb_js_next(&it, &k, &kl, &mv, &mve)) == 1) {
    fprintf(f, "%s\"%.*s\":", first ? "" : ",", (int)kl, k);
    first = false;
    int64_t ns;
    if (fb_js_key_is(k, kl, "ts") && us_to_ns(mv, mve, &ns)) put_us(f, ns + shift_ns);
    else fwrite(mv, 1, (size_t)(mve - mv), f);
  }
  fputc('}', f);
  return rc < 0 ? not_trace(in, "an event is malformed") : FB_OK; /* checked before: never */
}

static void put_header(FILE *f, const input *in, int n, int64_t origin) {
  fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"merged_from\":[", f);
  for (int i = 0; i < n; i++) {
    if (i) fputc(',', f);
    fb_json_str(f, in[i].path);
  }
  fputs("],\"ranks\":[", f);
  bool first = true;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < in[i].nranks; j++, first = false)
      fprintf(f, "%s%lld", first ? "" : ",", (long long)in[i].ranks[j]);
  fputs("],\"trace_origin_unix_ns\":", f);
  fb_json_int(f, origin);
  fputs(",\"time_unit\":\"us from trace_origin_unix_ns\",\"inputs\":[", f);
  for (int i = 0; i < n; i++) {
    if (i) fputc(',', f);
    fwrite(in[i].other, 1, (size_t)(in[i].other_end - in[i].other), f);
  }
  fputs("]},\"traceEvents\":[", f);
}

static fb_status write_merged(const char *out, const input *in, int n) {
  char dir[4096];
  const char *slash = strrchr(out, '/');
  const int dlen = slash ? (slash > out ? (int)(slash - out) : 1) : 0;
  if (slash) snprintf(dir, sizeof dir, "%.*s", dlen, out);
  else snprintf(dir, sizeof dir, ".");
  const char *name = slash ? slash + 1 : out;
  if (!*name)
    return FB_ERR(FB_EUSAGE, "trace-merge: OUT '%s' names a directory (want a file)", out);
  FB_TRY(fb_mkdir_p(dir));
  int64_t origin = in[0].origin_ns;
  for (int i = 1; i < n; i++)
    if (in[i].origin_ns < origin) origin = in[i].origin_ns;
  FILE *f;
  FB_TRY(fb_json_open(dir, name, &f));
  put_header(f, in, n, origin);
  fb_status st = FB_OK;
  bool first = true;
  for (int i = 0; i < n && st == FB_OK; i++) {
    fb_js_iter it;
    const char *v, *ve;
    int rc;
    fb_js_open(&it, in[i].events, in[i].events_end, false);
    while (st == FB_OK && (rc = fb_js_next(&it, NULL, NULL, &v, &ve)) == 1) {
      fputs(first ? "\n" : ",\n", f);
      first = false;
      st = put_event(f, &in[i], v, ve, in[i].origin_ns - origin);
    }
    if (st == FB_OK && rc < 0) st = not_trace(&in[i], "traceEvents is malformed");
  }
  fputs("\n]}\n", f);
  if (st != FB_OK) fb_json_discard(f); /* no half trace left behind */
  return st != FB_OK ? st : fb_json_close(f, name);
}

static fb_status merge(const char *out, char **paths, int n) {
  input *in = calloc((size_t)n, sizeof *in);
  if (!in) return FB_ERR(FB_ENOMEM, "trace-merge: out of host memory");
  fb_status st = fb_check_output(out, "trace-merge"); /* before the inputs are read */
  for (int i = 0; i < n && st == FB_OK; i++) {
    in[i].path = paths[i];
    st = parse_input(&in[i]);
  }
  if (st == FB_OK) st = check_ranks(in, n);
  if (st == FB_OK) st = write_merged(out, in, n);
  for (int i = 0; i < n; i++) input_free(&in[i]);
  free(in);
  return st;
}

int fb_trace_merge_main(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("usage: fsdpbench trace-merge OUT.json TRACE.json...\n"
           "Joins the per-process traces of an MPI / NCCL run (rank<r>_trace.json) into one file\n"
           "on one clock (each file's otherData.trace_origin_unix_ns), one process per rank.\n");
    return 0;
  }
  if (argc < 3) {
    fprintf(stderr, "fsdpbench: error: trace-merge: want `fsdpbench trace-merge OUT.json "
                    "rank0_trace.json rank1_trace.json ...` (got %d argument%s)\n", argc - 1,
            argc == 2 ? "" : "s");
    return 2;
  }
  fb_status st = merge(argv[1], argv + 2, argc - 2);
  if (st == FB_OK) return 0;
  fprintf(stderr, "fsdpbench: error: %s\n", fb_error_msg());
  return st == FB_EUSAGE ? 2 : 1;
}
