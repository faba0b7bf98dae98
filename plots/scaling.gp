# Figure 2: tokens/s per rank against the world size for each strategy, from the median step
# time (over the measured steps; the mean of the ranks' medians). Three panels predicted by
# the simulator on the h100 profile (1B, 8B, 70B; one sequence of sim_seq tokens per rank,
# activation recomputation, bf16 params, fp32 reduce; only configurations that fit in the
# device's memory), one panel executed on this machine (debug model, fp32, one sequence per
# rank, ranks are threads) with the cpu profile's prediction of the same runs.
# Reads data/scaling_{1B,8B,70B,exec,exec_pred}.csv by column name (make_plots.sh).
fig_w = 1400; fig_h = 1000
load gpdir."/style.gp"
set multiplot layout 2, 2 title "{/:Bold Tokens/s per rank against world size} {/*0.8 (from the median step time)}" font ",16"
set logscale x 2
set xlabel "world size (ranks)"
set ylabel "tokens/s per rank"
set key bottom left font ",10" box opaque samplen 2.5 maxrows 4
set title font ",12"
set format x "%g"
set yrange [0:*]
set offsets graph 0.05, graph 0.05, graph 0.12, 0
n_d = words(dp_strategies)
do for [m in "1B 8B 70B"] {
  set title sprintf("predicted: %s on %s (sim), 1 × %d tokens per rank, recompute\n{/*0.85 %s; a missing point: it does not fit in the %.0f GiB of the device}", m, pred_hw, sim_seq, gpu_dtypes, cap)
  f = data."/scaling_".m.".csv"
  set xrange [0.7:1500]
  plot for [i=1:n_d] f using "world":(column(word(dp_strategies, i))) with linespoints lw 2 \
       ps s_ps(word(dp_strategies, i)) pt s_pt(word(dp_strategies, i)) dt s_dt(word(dp_strategies, i)) \
       lc rgb s_color(word(dp_strategies, i)) title word(dp_strategies, i)
  unset key
}
unset logscale x
set xrange [0.5:grid_wmax + 0.5]
set xtics 1
set key top right font ",10" box opaque samplen 2.5 maxrows 4
set title sprintf("executed on this CPU (marks): debug model, 1 × %d tokens per rank\n{/*0.85 %s; dashed: the same runs predicted by the sim (cpu profile)}", sweep_seq, cpu_dtypes)
f = data."/scaling_exec.csv"
g = data."/scaling_exec_pred.csv"
n_g = words(grid_strategies)
plot for [i=1:n_g] f using "world":(column(word(grid_strategies, i))) with points \
       ps s_ps(word(grid_strategies, i)) lw 2 pt s_pt(word(grid_strategies, i)) \
       lc rgb s_color(word(grid_strategies, i)) title word(grid_strategies, i)." measured", \
     for [i=1:n_g] g using "world":(column(word(grid_strategies, i))) with lines dt 2 lw 1.5 \
       lc rgb s_color(word(grid_strategies, i)) notitle
unset multiplot
