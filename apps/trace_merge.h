/* `fsdpbench trace-merge OUT.json TRACE.json...`: joins the Chrome traces that the processes
 * of one MPI / NCCL run wrote (rank<r>_trace.json, traces/chrome_trace.h) into one file on one
 * clock. Each input's otherData names its ranks and the wall-clock (CLOCK_REALTIME) time of
 * its ts 0 (trace_origin_unix_ns); every timestamped event of an input is shifted by its
 * origin minus the earliest origin, to the nanosecond, and everything else is copied as it is
 * (pid = rank stays). The output (written under a temporary name, then renamed) has
 * otherData {merged_from, ranks, trace_origin_unix_ns, time_unit, inputs: [each input's
 * otherData]}.
 * Refused with exit 2 and one line: an input that is not such a trace (not JSON, no
 * traceEvents list, no otherData.ranks or otherData.trace_origin_unix_ns), two inputs holding
 * the same rank, no input. It does not check that the inputs come from the same run, and its
 * alignment is as good as the hosts' wall clocks agree (NTP: typically well under 1 ms). */
#ifndef FB_TRACE_MERGE_H
#define FB_TRACE_MERGE_H

/* argv[0] is "trace-merge". Returns the exit code. */
int fb_trace_merge_main(int argc, char **argv);

#endif
