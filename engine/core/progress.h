/* Progress of long work on stderr: "what k/N label, elapsed, ETA". On a terminal the line is
 * rewritten in place ('\r'); otherwise a plain line at most every few seconds and only once
 * the work has run that long, so short runs and tests that read stderr see nothing. It never
 * writes to stdout and decides nothing else. */
#ifndef FB_PROGRESS_H
#define FB_PROGRESS_H
#include <stdbool.h>

typedef struct fb_progress {
  const char *what; /* "compare", "plan", "calibrate", "train" */
  int total;
  bool on;          /* false: every call is a no-op */
  bool tty;         /* stderr is a terminal: rewrite in place */
  bool shown;       /* a line sits on the terminal without its newline */
  double t0, last;  /* start, last line written (monotonic seconds) */
} fb_progress;

/* on: the caller's condition (e.g. rank 0, not --quiet); also off when total < 1. */
void fb_progress_start(fb_progress *p, const char *what, int total, bool on);
/* `done` of total finished; `label` (may be NULL) names the item just done or next. */
void fb_progress_update(fb_progress *p, int done, const char *label);
/* Blanks the in-place line (before other output on the terminal); a no-op otherwise. */
void fb_progress_clear(fb_progress *p);
/* The end: blanks the in-place line. Also to call on failure, before the error line. */
void fb_progress_end(fb_progress *p);
/* Whether stderr is a terminal (for callers that show progress only there). */
bool fb_progress_tty(void);

#endif
