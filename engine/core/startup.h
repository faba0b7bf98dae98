/* How long the process took to start: the time from exec to now, including what happens
 * before main (the dynamic loader mapping and relocating the shared libraries, their
 * constructors). A constructor snapshots, the moment the executable's own constructors run,
 * the kernel's accounting of this (main) thread since it began: its CPU time
 * (CLOCK_THREAD_CPUTIME_ID) plus its time waiting for a CPU (run_delay, /proc/self/schedstat),
 * both in ns; the age is that snapshot plus CLOCK_MONOTONIC since. Time blocked before main
 * (reading libraries from a cold disk) is not counted; with a warm page cache there is none.
 * The kernel's process start time (/proc/self/stat starttime) is only in 10 ms ticks, too
 * coarse for a figure of this size; fb_startup_mark prints it beside for comparison.
 * It does not decide what a run prints (the runner logs the figure once). */
#ifndef FB_STARTUP_H
#define FB_STARTUP_H

/* Milliseconds from exec to now (see above). */
double fb_startup_ms(void);
/* The wall clock now (CLOCK_REALTIME), seconds since the epoch: comparable with the time a
 * parent process took before exec'ing this one (`date +%s.%N`). */
double fb_unix_time_s(void);
/* With FB_STARTUP_TRACE set in the environment, prints "startup: <what> at X ms" to stderr
 * (X = fb_startup_ms()); otherwise nothing. The first call also prints the time before main. */
void fb_startup_mark(const char *what);

#endif
