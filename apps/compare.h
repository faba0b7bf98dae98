/* `fsdpbench compare`: runs several strategies (and optionally a grid of other run options,
 * --sweep) on the same model, data and seed through fb_run, prints one fixed-column table and
 * writes the records as CSV for the plots. It measures nothing itself: every figure comes from
 * the run result and the report's summary (apps/report.h). */
#ifndef FB_COMPARE_H
#define FB_COMPARE_H

/* argv[0] is the subcommand name ("compare"); then the run flags plus
 *   --strategies a,b,c         strategies to run (default ddp,zero3,fsdp,yafsdp)
 *   --sweep key=v1,v2[;k2=...] a grid over any run option (repeatable)
 *   --out DIR                  where compare.csv, compare_steps.csv, memory_timeline.csv and
 *                              runs/<id>-<strategy>/ go (default: compare-out)
 * Returns the process exit code: 0 when at least one run succeeded, 2 for bad input (one line
 * on stderr, nothing run), 1 when every run failed or the files could not be written. */
int fb_compare_main(int argc, char **argv);

#endif
