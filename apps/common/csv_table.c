/* CSV reader (see csv_table.h). One pass over the bytes with a small state machine; fields and
 * rows grow geometrically. It keeps everything as text. */
#include "csv_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct growbuf {
  char *p;
  size_t n, cap;
} growbuf;

static int gb_put(growbuf *b, char ch) {
  if (b->n + 1 >= b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 64;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  b->p[b->n++] = ch;
  b->p[b->n] = 0;
  return 0;
}

/* Appends the field in b to the current row (taking its buffer). */
static int end_field(char ***row, int *n, int *cap, growbuf *b) {
  if (*n == *cap) {
    int c = *cap ? 2 * *cap : 16;
    char **r = realloc(*row, (size_t)c * sizeof *r);
    if (!r) return -1;
    *row = r;
    *cap = c;
  }
  if (!b->p && gb_put(b, 0) < 0) return -1;
  if (b->n == 1 && b->p[0] == 0) b->n = 0;
  b->p[b->n] = 0;
  (*row)[(*n)++] = b->p;
  *b = (growbuf){0};
  return 0;
}

static int end_row(fb_csv *t, int *cap, char **row, int n) {
  if (t->nrows == *cap) {
    int c = *cap ? 2 * *cap : 64;
    char ***rows = realloc(t->rows, (size_t)c * sizeof *rows);
    int *nc = realloc(t->ncols, (size_t)c * sizeof *nc);
    if (rows) t->rows = rows;
    if (nc) t->ncols = nc;
    if (!rows || !nc) return -1;
    *cap = c;
  }
  t->rows[t->nrows] = row;
  t->ncols[t->nrows++] = n;
  return 0;
}

fb_status fb_csv_read(const char *path, const char *flag, fb_csv *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f) return FB_ERR(FB_EUSAGE, "%s: cannot read '%s': %s", flag, path, strerror(errno));
  growbuf b = {0};
  char **row = NULL;
  int nf = 0, fcap = 0, rcap = 0, line = 1, ch;
  int quoted = 0, after_quote = 0, any = 0;
  fb_status st = FB_OK;
  while ((ch = fgetc(f)) != EOF) {
    any = 1;
    if (quoted) {
      if (ch == '"') {
        int nx = fgetc(f);
        if (nx == '"') {
          if (gb_put(&b, '"') < 0) goto nomem;
          continue;
        }
        quoted = 0;
        after_quote = 1;
        if (nx == EOF) break;
        ch = nx;
      } else {
        if (ch == '\n') line++;
        if (gb_put(&b, (char)ch) < 0) goto nomem;
        continue;
      }
    }
    if (ch == '"' && b.n == 0 && !after_quote) {
      quoted = 1;
    } else if (ch == ',') {
      if (end_field(&row, &nf, &fcap, &b) < 0) goto nomem;
      after_quote = 0;
    } else if (ch == '\n') {
      if (b.n > 0 && b.p[b.n - 1] == '\r') b.p[--b.n] = 0;
      if (end_field(&row, &nf, &fcap, &b) < 0 || end_row(out, &rcap, row, nf) < 0) goto nomem;
      row = NULL;
      nf = fcap = 0;
      after_quote = 0;
      line++;
    } else if (gb_put(&b, (char)ch) < 0) {
      goto nomem;
    }
  }
  if (quoted) {
    st = FB_ERR(FB_EUSAGE, "%s: '%s': unterminated quoted field (started before line %d)", flag,
                path, line);
    goto fail;
  }
  if (b.n > 0 || nf > 0) {
    if (end_field(&row, &nf, &fcap, &b) < 0 || end_row(out, &rcap, row, nf) < 0) goto nomem;
    row = NULL;
  }
  fclose(f);
  if (!any || out->nrows < 1) {
    fb_csv_free(out);
    return FB_ERR(FB_EUSAGE, "%s: '%s' is empty (want a CSV file with a header row)", flag, path);
  }
  return FB_OK;
nomem:
  st = FB_ERR(FB_ENOMEM, "%s: out of host memory reading '%s'", flag, path);
fail:
  for (int i = 0; i < nf; i++) free(row[i]);
  free(row);
  free(b.p);
  fclose(f);
  fb_csv_free(out);
  return st;
}

void fb_csv_free(fb_csv *t) {
  for (int r = 0; r < t->nrows; r++) {
    for (int c = 0; c < t->ncols[r]; c++) free(t->rows[r][c]);
    free(t->rows[r]);
  }
  free(t->rows);
  free(t->ncols);
  memset(t, 0, sizeof *t);
}

int fb_csv_col(const fb_csv *t, const char *name) {
  if (t->nrows < 1) return -1;
  for (int c = 0; c < t->ncols[0]; c++)
    if (!strcmp(t->rows[0][c], name)) return c;
  return -1;
}

const char *fb_csv_get(const fb_csv *t, int r, int col) {
  if (r < 0 || r >= t->nrows || col < 0 || col >= t->ncols[r]) return "";
  return t->rows[r][col];
}
