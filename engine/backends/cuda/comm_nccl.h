/* The nccl communicator's entry points (comm_nccl.c), inside the CUDA module only: the engine
 * reaches them through the module's table (engine/backends/cuda_module.h: nccl_ops,
 * nccl_create). The CUDA module sits above engine/comm, whose interface it implements. */
#ifndef FB_COMM_NCCL_H
#define FB_COMM_NCCL_H
#include "../../comm/comm.h"

extern const fb_comm_ops fb_nccl_comm_ops;
/* nccl: one GPU per rank; under a launcher one process per GPU, bootstrapped over MPI (mpirun)
 * or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (TCP rendezvous, like torchrun); without one, the
 * ranks are threads of this process sharing one unique id (one GPU each). */
fb_status fb_comm_nccl_create(fb_device *dev, double timeout_s, fb_comm **out);

#endif
