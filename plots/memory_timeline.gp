# Figure 3: memory of rank 0 over one training step for each strategy, stacked by category
# (the allocation timeline of the last step, predicted by the simulator: every alloc and free
# the strategy's real code makes; times from the cost model). Gathered parameters
# ("param full") and unsharded gradients rise and fall unit by unit for the sharded strategies.
# Reads data/memory_timeline_<strategy>.csv (plots/make_plots.sh).
fig_w = 1400; fig_h = 1000
load gpdir."/style.gp"
set multiplot layout 2, 2 title sprintf("{/:Bold Memory of rank 0 over one step} (predicted: %s, W = %d, sim %s)", pred_model, pred_w, pred_hw) font ",16"
set xlabel "time since the step's start (ms)"
set ylabel "memory (GiB)"
set style fill solid 0.9 noborder
set key top right font ",10" box opaque samplen 1.5 maxrows 4
set yrange [0:*]
set offsets 0, 0, graph 0.22, 0
first = word(strategies, 1)
do for [s in strategies] {
  set title s
  if (s ne first) { unset key }  # one legend, in the first panel
  f = data."/memory_timeline_".s.".csv"
  plot for [k=8:1:-1] f using 1:k+1 with filledcurves x1 lc rgb M_COLOR[k] title M_NAME[k]
}
unset multiplot
