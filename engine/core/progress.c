/* Progress lines (see progress.h): a terminal gets one line rewritten in place at most ten
 * times a second; a pipe or file gets a plain line at most every PLAIN_EVERY_S seconds, the
 * first only after the work has run that long. It formats and writes; it keeps no state
 * beyond the caller's struct. */
#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define TTY_EVERY_S 0.1
#define PLAIN_EVERY_S 5.0

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_time(double s, char *buf, size_t n) {
  if (s < 0) s = 0;
  long t = (long)(s + 0.5);
  if (t < 60) snprintf(buf, n, "%lds", t);
  else if (t < 3600) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
  else snprintf(buf, n, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

bool fb_progress_tty(void) { return isatty(STDERR_FILENO) == 1; }

void fb_progress_start(fb_progress *p, const char *what, int total, bool on) {
  *p = (fb_progress){.what = what, .total = total, .on = on && total > 0,
                     .tty = fb_progress_tty(), .t0 = now_s()};
  p->last = p->t0;
}

void fb_progress_update(fb_progress *p, int done, const char *label) {
  if (!p->on) return;
  const double t = now_s(), el = t - p->t0;
  const bool last = done >= p->total;
  if (p->tty ? (t - p->last < TTY_EVERY_S && !last) : (t - p->last < PLAIN_EVERY_S)) return;
  p->last = t;
  char e[48], eta[48] = "-";
  fmt_time(el, e, sizeof e);
  if (done > 0) fmt_time(el / done * (p->total - done), eta, sizeof eta);
  fprintf(stderr, "%s%s %d/%d%s%s, %s elapsed, ETA %s%s", p->tty ? "\r\033[K" : "", p->what, done,
          p->total, label && *label ? " " : "", label ? label : "", e, eta, p->tty ? "" : "\n");
  p->shown = p->tty;
  fflush(stderr);
}

void fb_progress_clear(fb_progress *p) {
  if (!p->on || !p->shown) return;
  fputs("\r\033[K", stderr);
  fflush(stderr);
  p->shown = false;
}

void fb_progress_end(fb_progress *p) {
  fb_progress_clear(p);
  p->on = false;
}
