/* Fault injection for tests (see fault.h): parses FSDPBENCH_FAULT, holds the armed fault for
 * the run in progress and fires it at the injection points (executor.c after the forward,
 * checkpoint.c inside the save). Firing kills this process (SIGKILL), or parks the calling
 * thread forever. It prints nothing and measures nothing. */
#define _GNU_SOURCE
#include "fault.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALLOWED "kill|hang:RANK:STEP[:forward|save], e.g. kill:1:3"

static struct {
  fb_fault f;
  bool threads;
  void (*parked)(void *arg, int rank);
  void *arg;
} armed;
static atomic_bool fired;

/* A non-negative decimal integer, nothing else. */
static bool parse_int(const char *s, size_t n, long hi, int *out) {
  if (n == 0 || n > 10) return false;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  if (v > hi) return false;
  *out = (int)v;
  return true;
}

fb_status fb_fault_parse(const char *value, fb_fault *out) {
  memset(out, 0, sizeof *out);
  const char *f[5];
  size_t len[5];
  int n = 0;
  for (const char *p = value;; n++) {
    if (n == 5) break;
    const char *c = strchr(p, ':');
    f[n] = p;
    len[n] = c ? (size_t)(c - p) : strlen(p);
    if (!c) {
      n++;
      break;
    }
    p = c + 1;
  }
  bool ok = n == 3 || n == 4;
  if (ok) {
    out->hang = len[0] == 4 && !strncmp(f[0], "hang", 4);
    ok = out->hang || (len[0] == 4 && !strncmp(f[0], "kill", 4));
  }
  ok = ok && parse_int(f[1], len[1], 1 << 20, &out->rank) &&
       parse_int(f[2], len[2], 1 << 30, &out->step) && out->step >= 1;
  if (ok && n == 4) {
    if (len[3] == 4 && !strncmp(f[3], "save", 4)) out->phase = FB_FAULT_SAVE;
    else ok = len[3] == 7 && !strncmp(f[3], "forward", 7);
  }
  if (!ok) {
    memset(out, 0, sizeof *out);
    return FB_ERR(FB_EUSAGE, "FSDPBENCH_FAULT: '%s' is not allowed (want %s)", value, ALLOWED);
  }
  out->set = true;
  return FB_OK;
}

fb_status fb_fault_from_env(int world, fb_fault *out) {
  memset(out, 0, sizeof *out);
  const char *v = getenv("FSDPBENCH_FAULT");
  if (!v) return FB_OK;
  FB_TRY(fb_fault_parse(v, out));
  if (out->rank >= world) {
    out->set = false;
    return FB_ERR(FB_EUSAGE, "FSDPBENCH_FAULT: rank %d in '%s' is not allowed with %d rank(s) "
                  "(want 0..%d)", out->rank, v, world, world - 1);
  }
  return FB_OK;
}

void fb_fault_arm(const fb_fault *f, bool threads, void (*parked)(void *arg, int rank), void *arg) {
  armed.f = *f;
  armed.threads = threads;
  armed.parked = parked;
  armed.arg = arg;
  atomic_store(&fired, false);
}

void fb_fault_disarm(void) { memset(&armed, 0, sizeof armed); }

/* Never returns: the thread waits for signals forever (a handler that returns resumes it). */
static _Noreturn void park(void) {
  for (;;) pause();
}

void fb_fault_point(int rank, int step, fb_fault_phase phase) {
  const fb_fault *f = &armed.f;
  if (!f->set || f->rank != rank || f->step != step || f->phase != phase) return;
  if (atomic_exchange(&fired, true)) return; /* once per run (several micro-steps) */
  if (armed.threads) {
    if (armed.parked) armed.parked(armed.arg, rank);
    park();
  }
  if (f->hang) park();
  raise(SIGKILL);
  park(); /* not reached */
}
