/* The inter-tensor ZeRO-3 partition: which rank owns each whole parameter tensor.
 * Greedy largest-first: parameters sorted by numel descending (ties by id ascending), each
 * assigned to the rank with the least owned elements so far (ties to the lowest rank).
 * Pure function of the model and world size; it allocates nothing on any device. */
#ifndef FB_ZERO3_PARTITION_H
#define FB_ZERO3_PARTITION_H
#include <stdint.h>

#include "../engine/model/model.h"

/* owner[m->nparams] receives each parameter's rank; load[world] the elements each rank owns
 * (world >= 1). Needs no memory of its own (selection by scanning; models have at most a few
 * thousand tensors). */
void fb_zero3_partition(const fb_model *m, int world, int *owner, int64_t *load);

/* max(load) / mean(load); 1 when the model is empty. */
double fb_zero3_imbalance(const int64_t *load, int world);

#endif
