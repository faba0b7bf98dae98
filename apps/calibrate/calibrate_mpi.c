/* Calibrating the MPI communicator (`mpirun -np W fsdpbench calibrate --comm mpi`): every
 * process opens a cpu device, a comm stream and the MPI communicator, times all-gather,
 * reduce-scatter and all-reduce, idle and with a GEMM thread each, and rank 0 fits them as
 * rings on a shared host (collectives: ring_tree; the machine's bandwidth split among the W
 * ranks: Open MPI's shared-memory transport moves each rank's ring traffic through the one
 * memory system). The compute figures are not measured here: they are the machine's, taken
 * from a base profile that a plain `calibrate` wrote (calibrate.c). Built only with MPI. */
#include <mpi.h>
#include <stdio.h>

#include "../engine/device/device.h"
#include "calibrate_comm.h"
#include "../engine/backends/registry.h"

static struct {
  fb_device *d;
  fb_stream *s;
  fb_comm *comm;
} M;

fb_status fb_calib_mpi_begin(int *rank, int *world) {
  FB_TRY(fb_mpi_init(NULL, NULL, rank, world));
  if (*world < 2)
    return FB_ERR(FB_EUSAGE, "calibrate --comm mpi: the launcher started 1 process; the MPI "
                  "communicator is measured between processes (mpirun -np 2 ./fsdpbench "
                  "calibrate --comm mpi)");
  FB_TRY(fb_device_open(fb_device_lookup("cpu"), *rank, *world, 1, 0, NULL, &M.d));
  FB_TRY(M.d->ops->stream_create(M.d, FB_STREAM_COMM, &M.s));
  return fb_comm_mpi_create(M.d, 60.0, &M.comm);
}

static fb_status meet(void *ctx) {
  (void)ctx;
  FB_TRY(fb_barrier(M.comm, M.s));
  return fb_stream_sync(M.d, M.s);
}

fb_status fb_calibrate_mpi_comm(fb_hardware *hw, bool quick, bool quiet, double *fit_rms) {
  const int reps = quick ? 3 : 9;
  fb_calib_times idle, busy;
  fb_calib_spinner sp;
  FB_TRY(fb_calib_time_collectives(M.comm, M.s, reps, meet, NULL, idle));
  FB_TRY(fb_calib_spinner_start(&sp));
  fb_status st = fb_calib_time_collectives(M.comm, M.s, reps, meet, NULL, busy);
  fb_status s2 = fb_calib_spinner_stop(&sp);
  FB_TRY(st);
  FB_TRY(s2);
  if (M.comm->rank != 0) return FB_OK; /* rank 0's times fit the profile */
  hw->shared_host = true;
  hw->collectives = FB_COLLS_RING_TREE;
  hw->devices_per_node = 1;
  double r = fb_calib_fit_comm(hw, M.comm->world, idle, busy, "MPI communicator (processes)",
                               quiet);
  if (fit_rms) *fit_rms = r;
  return FB_OK;
}

/* The load check's vote (calibrate.c): each process's own share of the load, and rank 0's
 * verdict, summed over the processes. */
fb_status fb_calib_mpi_sum(double *v) {
  fb_buf send = {0}, recv = {0};
  fb_status st = FB_OK;
  FB_CHECK_GOTO(st, fb_alloc(M.d, sizeof(double), FB_MEM_COMM, "calib.vote", &send), out);
  FB_CHECK_GOTO(st, fb_alloc(M.d, sizeof(double), FB_MEM_COMM, "calib.vote", &recv), out);
  *(double *)send.ptr = *v; /* cpu device memory is host memory */
  FB_CHECK_GOTO(st, fb_all_reduce(M.comm, M.s, -1, send.ptr, recv.ptr, 1, FB_F64), out);
  FB_CHECK_GOTO(st, fb_stream_sync(M.d, M.s), out);
  *v = *(const double *)recv.ptr;
out:
  fb_free(M.d, &send, NULL);
  fb_free(M.d, &recv, NULL);
  return st;
}

void fb_calib_mpi_end(void) {
  if (M.comm) fb_comm_destroy(M.comm);
  if (M.s) M.d->ops->stream_destroy(M.d, M.s);
  if (M.d) fb_device_close(M.d);
  M.comm = NULL;
  M.s = NULL;
  M.d = NULL;
  fb_mpi_finalize();
}
