/* A whole CSV file in memory (RFC 4180: quoted fields, "" escapes, newlines inside quotes),
 * with its header, for the tools that read public measurement tables (validate --dataset).
 * It does not interpret values: callers look columns up by name and parse what they need. */
#ifndef FB_CSV_TABLE_H
#define FB_CSV_TABLE_H
#include "../engine/core/status.h"

typedef struct fb_csv {
  char ***rows;   /* rows[r][c]: NUL-terminated field; row 0 is the header */
  int *ncols;     /* fields in each row */
  int nrows;      /* including the header */
} fb_csv;

/* Reads `path`. A missing or unreadable file, an empty file or an unterminated quote is
 * FB_EUSAGE naming `flag`, the file and the line. */
fb_status fb_csv_read(const char *path, const char *flag, fb_csv *out);
void fb_csv_free(fb_csv *t);
/* Column index of header name `name`, or -1. */
int fb_csv_col(const fb_csv *t, const char *name);
/* Field `col` of data row `r` (1-based, as rows[]), "" when the row is short or col < 0. */
const char *fb_csv_get(const fb_csv *t, int r, int col);

#endif
