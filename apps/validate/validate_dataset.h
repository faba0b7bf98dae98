/* `fsdpbench validate --dataset FILE`: the simulator against public GPU measurements.
 * The file's header says what it holds (see ../shared/gpu-data/SOURCES.md for the format):
 *  - training runs (column tokens_per_s_per_gpu): every row the simulator can express is run
 *    through the same runner as `--backend sim` with the row's model, GPU profile, world,
 *    batch, sequence, precision, recompute and sharding; predicted tokens/s per GPU is
 *    compared with the published figure;
 *  - GEMM throughput (columns m, n, k, tflops), attention throughput (seq_len, head_dim,
 *    tflops) and collective bus bandwidth (collective, bytes, busbw_gbs): the cost model of
 *    the row's profile, op by op.
 * It prints one line per row (configuration, published, predicted, error %), the rows it
 * could not express with the reason, and a closing line
 *   `dev-set: N rows, median |err| X%, worst Y%, within 15%: K/N`
 * (`op-set: ...` for the microbenchmark files). With --out DIR it also writes DIR/dataset.csv.
 * It never tunes anything: the profiles in models/hardware/ are used as they are. */
#ifndef FB_VALIDATE_DATASET_H
#define FB_VALIDATE_DATASET_H

/* argv[0] is "validate"; argv holds --dataset FILE [--out DIR] [--verbose]. Returns the exit
 * code (0 ok, 2 bad usage or unreadable file, 1 a run failed). */
int fb_validate_dataset_main(int argc, char **argv);

#endif
