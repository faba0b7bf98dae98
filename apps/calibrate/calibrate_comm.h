/* Calibrating a communicator: the collective timings and fits behind a profile's intra_* /
 * inter_* figures, for the local communicator (calibrate_comm.c) and MPI (calibrate_mpi.c).
 * Internal to engine/sim: `fsdpbench calibrate` (calibrate.c) is the user-facing part. */
#ifndef FB_CALIBRATE_COMM_H
#define FB_CALIBRATE_COMM_H
#include <pthread.h>
#include <stdbool.h>

#include "../engine/comm/comm.h"
#include "../engine/sim/hardware.h"

enum { FB_CALIB_NSIZES = 5, FB_CALIB_NCOLLS = 3 };
/* all-gather, reduce-scatter, all-reduce, each at payloads of W * count * 4 bytes */
extern const fb_coll fb_calib_colls[FB_CALIB_NCOLLS];
extern const size_t fb_calib_counts[FB_CALIB_NSIZES];

typedef double fb_calib_times[FB_CALIB_NCOLLS][FB_CALIB_NSIZES]; /* seconds */

/* Sorts v and returns its lower quartile (a timing that a burst of other load does not drag
 * up; the median: fb_median, median.h). n >= 1. */
double fb_calib_lower_quartile(double *v, int n);

/* Meets the other ranks (a barrier) before each timed call. */
typedef fb_status (*fb_calib_meet_fn)(void *ctx);

/* Times every collective at every size on one rank's `comm` (buffers from its device, issued
 * on `s`): one untimed call, then `reps` timed ones each after meet(ctx); out = the lower
 * quartiles. The all-reduce moves W * count elements, so its payload equals the gathered
 * buffer of the others. Every rank calls it with the same arguments. */
fb_status fb_calib_time_collectives(fb_comm *comm, fb_stream *s, int reps, fb_calib_meet_fn meet,
                                    void *ctx, fb_calib_times out);

/* A thread running single-threaded GEMMs until stopped: a rank's compute beside its comm. */
typedef struct fb_calib_spinner {
  volatile int stop;
  fb_status st;
  bool started;
  pthread_t th;
} fb_calib_spinner;
fb_status fb_calib_spinner_start(fb_calib_spinner *sp);
/* Stops and joins; returns the spinner's first failure. */
fb_status fb_calib_spinner_stop(fb_calib_spinner *sp);

/* The bandwidth fit's grid (B/s): a fit at either end sits at a clamp bound. */
#define FB_CALIB_BW_MIN 1e6
#define FB_CALIB_BW_MAX 1e13

/* Fits hw's intra_* = inter_* figures to times measured at `world` ranks through the cost
 * model as hw describes it (hw->collectives, shared_host): per collective the latency from
 * the smallest size and the bandwidth over the payloads of a MiB and more; the profile takes
 * the medians over the collectives of the `busy` times (measured with compute beside, as in a
 * step). Prints both tables unless quiet. Returns the relative RMS residual of the bandwidth
 * fit of the collective whose bandwidth the profile took. */
double fb_calib_fit_comm(fb_hardware *hw, int world, const fb_calib_times idle,
                         const fb_calib_times busy, const char *what, bool quiet);

/* Makes rank `rank`'s communicator over its device (every rank thread calls it). */
typedef fb_status (*fb_calib_comm_make)(void *ctx, int rank, fb_device *dev, fb_comm **out);
/* `world` (2..16) rank threads of this process, each opening rank r of a `backend` device and
 * a communicator through make, time every collective (fb_calib_time_collectives, `reps` each;
 * with a GEMM thread per rank when busy): rank 0's times into out. */
fb_status fb_calib_comm_pass(const char *backend, int world, int reps, bool busy,
                             fb_calib_comm_make make, void *ctx, fb_calib_times out);

/* The local communicator: 2 rank threads of this process, each with its own `backend` device
 * (cpu; cpu-opaque, whose buffers it stages through host memory as a step does), idle and
 * with a GEMM thread per rank; sets hw's link figures, collectives = shared_memory, and
 * *fit_rms (may be NULL) as fb_calib_fit_comm returns it. */
fb_status fb_calibrate_local_comm(fb_hardware *hw, const char *backend, bool quick, bool quiet,
                                  double *fit_rms);

/* MPI (calibrate_mpi.c, built with MPI): every process of the launcher calls these. */
/* MPI_Init and a cpu device, comm stream and MPI communicator for this process. */
fb_status fb_calib_mpi_begin(int *rank, int *world);
/* Times the MPI collectives (idle, then with a GEMM thread per process) and, on rank 0, fits
 * hw's link figures (collectives = ring_tree on this shared host) and sets *fit_rms as
 * fb_calib_fit_comm returns it. */
fb_status fb_calibrate_mpi_comm(fb_hardware *hw, bool quick, bool quiet, double *fit_rms);
/* Every process passes its *v; each gets the sum over the processes (a double all-reduce). */
fb_status fb_calib_mpi_sum(double *v);
/* Frees the communicator and device, finalizes MPI. */
void fb_calib_mpi_end(void);

#endif
