/* `fsdpbench validate [run flags]`: runs one configuration twice — executed on the cpu backend
 * and simulated with a hardware profile (default: the calibrated `cpu`) — and compares them
 * op by op. Both runs execute the same executor and strategy code, so their op sequences are
 * the same; ops are matched by (rank, track, position) within the traced steps. It prints the
 * step time error, a per-op table (count, measured ms, predicted ms, error) and the peak memory
 * of both (equal by construction), and writes DIR/trace.json with both runs side by side
 * (measured ranks as "rank N (measured)", predicted as "rank N (predicted)", same track names)
 * plus DIR/validate.csv (one row per op name). It does not tune the profile (see calibrate). */
#ifndef FB_VALIDATE_H
#define FB_VALIDATE_H

/* argv[0] is the subcommand name ("validate"). Returns the process exit code. */
int fb_validate_main(int argc, char **argv);

#endif
