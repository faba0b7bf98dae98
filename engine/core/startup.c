/* Start-up clock (startup.h): a constructor snapshot of the kernel's per-thread accounting,
 * then CLOCK_MONOTONIC. It does not print unless FB_STARTUP_TRACE is set. */
#include "startup.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double ctor_mono_ms;   /* CLOCK_MONOTONIC when the constructor ran */
static double ctor_age_ms;    /* time from exec to the constructor (kernel accounting) */
static double ctor_tick_ms;   /* the same from /proc/self/stat starttime (10 ms ticks) */

static double clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* run_delay: ns this thread has waited on a runqueue (second field of schedstat). */
static double run_delay_ms(void) {
  FILE *f = fopen("/proc/self/schedstat", "r");
  unsigned long long run = 0, wait = 0;
  int got = f ? fscanf(f, "%llu %llu", &run, &wait) : 0;
  if (f) fclose(f);
  return got == 2 ? (double)wait * 1e-6 : 0.0;
}

/* now (CLOCK_BOOTTIME) less starttime (field 22 of /proc/self/stat, clock ticks since boot). */
static double tick_age_ms(void) {
  FILE *f = fopen("/proc/self/stat", "r");
  char buf[1024];
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  char *p = buf;
  for (char *q = buf; *q; q++)
    if (*q == ')') p = q + 1; /* the command name may hold spaces */
  unsigned long long start = 0;
  if (sscanf(p, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d "
                "%llu", &start) != 1)
    return -1;
  return clock_ms(CLOCK_BOOTTIME) - (double)start * 1e3 / (double)sysconf(_SC_CLK_TCK);
}

__attribute__((constructor)) static void startup_snapshot(void) {
  ctor_mono_ms = clock_ms(CLOCK_MONOTONIC);
  ctor_age_ms = clock_ms(CLOCK_THREAD_CPUTIME_ID) + run_delay_ms();
  if (getenv("FB_STARTUP_TRACE")) ctor_tick_ms = tick_age_ms();
}

double fb_startup_ms(void) { return ctor_age_ms + clock_ms(CLOCK_MONOTONIC) - ctor_mono_ms; }

double fb_unix_time_s(void) { return clock_ms(CLOCK_REALTIME) * 1e-3; }

void fb_startup_mark(const char *what) {
  static int first = 1;
  if (!getenv("FB_STARTUP_TRACE")) return;
  if (first)
    fprintf(stderr, "startup: before main (loader, library constructors) %.2f ms "
            "(/proc/self/stat starttime says %.0f ms, 10 ms ticks)\n", ctor_age_ms, ctor_tick_ms);
  first = 0;
  fprintf(stderr, "startup: %s at %.2f ms (process CPU time %.2f ms, CLOCK_MONOTONIC %.3f ms)\n",
          what, fb_startup_ms(), clock_ms(CLOCK_PROCESS_CPUTIME_ID), clock_ms(CLOCK_MONOTONIC));
}
