/* Fault injection for tests: FSDPBENCH_FAULT=ACTION:RANK:STEP[:PHASE] makes one rank fail on
 * purpose so the tests can check what the others do (exit 4 within the timeout, one line
 * naming the rank, no half-written checkpoint).
 *   ACTION  kill   the rank dies: its process raises SIGKILL on itself (mpi, launched nccl);
 *                  where ranks are threads (local) the rank's thread stops participating
 *                  without a word to the group, as a dead peer would, and never returns
 *           hang   the rank stops forever (a stuck peer); for threads the same as kill
 *   RANK    0 .. world-1
 *   STEP    1-based, as the step log counts: the fault fires during step STEP
 *   PHASE   forward (default): after the rank's first micro-step forward, so its peers are
 *                   inside the backward's collectives when it goes
 *           save    inside the checkpoint writer of step STEP's save (--ckpt with --save-every
 *                   dividing STEP, or the last step): after this rank's shard is written,
 *                   before the ranks agree that every shard landed
 * Only executing backends honour it (sim runs ignore it). It does not time anything nor
 * report: the surviving ranks' collectives do. Not for production use. */
#ifndef FB_FAULT_H
#define FB_FAULT_H
#include <stdbool.h>

#include "../core/status.h"

typedef enum fb_fault_phase { FB_FAULT_FORWARD, FB_FAULT_SAVE } fb_fault_phase;

typedef struct fb_fault {
  bool set;   /* the variable was given */
  bool hang;  /* hang, else kill */
  int rank, step;
  fb_fault_phase phase;
} fb_fault;

/* Parses a value (strictly): FB_EUSAGE naming FSDPBENCH_FAULT, the value and what is allowed. */
fb_status fb_fault_parse(const char *value, fb_fault *out);
/* Reads FSDPBENCH_FAULT (unset: out->set false) and checks RANK against the world. */
fb_status fb_fault_from_env(int world, fb_fault *out);

/* Arms the fault for the run about to start. `threads`: ranks are threads of this process;
 * then `parked(arg, rank)` is called on the victim's thread just before it stops forever, so
 * the runner does not wait for it. */
void fb_fault_arm(const fb_fault *f, bool threads, void (*parked)(void *arg, int rank), void *arg);
void fb_fault_disarm(void);

/* An injection point: fires (does not return) when the armed fault names this rank, step
 * (1-based) and phase. */
void fb_fault_point(int rank, int step, fb_fault_phase phase);

#endif
