# Figure 2: tokens/s per rank against the world size for each strategy. Three panels predicted
# by the simulator on the h100 profile (1B, 8B, 70B; one 1024-token sequence per rank,
# activation recomputation; only configurations that fit in the device's memory), one panel
# executed on this machine (debug model, ranks are threads) with the cpu profile's prediction.
# Reads data/scaling_{1B,8B,70B,exec,exec_pred}.csv (plots/make_plots.sh).
fig_w = 1400; fig_h = 1000
load gpdir."/style.gp"
set multiplot layout 2, 2 title "{/:Bold Tokens/s per rank against world size}" font ",16"
set logscale x 2
set xlabel "world size (ranks)"
set ylabel "tokens/s per rank"
set key bottom left font ",11" box opaque samplen 2.5
set title font ",12"
set format x "%g"
set yrange [0:*]
set offsets graph 0.05, graph 0.05, graph 0.12, 0
do for [m in "1B 8B 70B"] {
  set title sprintf("predicted: %s on H100 (sim), 1 × 1024 tokens per rank, recompute\n{/*0.85 a strategy's missing points: it does not fit in the 80 GiB of an H100}", m)
  f = data."/scaling_".m.".csv"
  set xrange [0.7:1500]
  plot for [i=1:4] f using 1:i+1 with linespoints lw 2 ps S_PS[i] pt S_PT[i] dt S_DT[i] lc rgb S_COLOR[i] title S_NAME[i]
}
unset logscale x
set xrange [0.5:4.5]
set xtics 1
set title sprintf("executed on this CPU (marks): debug model, seq %d\n{/*0.85 dashed: the same runs predicted by the sim with the cpu profile}", sweep_seq)
f = data."/scaling_exec.csv"
g = data."/scaling_exec_pred.csv"
plot for [i=1:4] f using 1:i+1 with points ps S_PS[i] lw 2 pt S_PT[i] lc rgb S_COLOR[i] title S_NAME[i]." measured", \
     for [i=1:4] g using 1:i+1 with lines dt 2 lw 1.5 lc rgb S_COLOR[i] notitle
unset multiplot
