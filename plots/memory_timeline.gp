# Figure 3: memory of rank 0 over one training step for each strategy, stacked by category
# (the allocation timeline of the last step, predicted by the simulator: every alloc and free
# the strategy's real code makes; times from the cost model; bf16 params, fp32 reduce).
# Gathered parameters ("param full") and unsharded gradients rise and fall unit by unit for the
# sharded strategies. One panel per strategy of `strategies`, three to a row.
# Reads data/memory_timeline_<strategy>.csv by column name (make_plots.sh).
load data."/settings.gp"  # (strategies: the panels, before the size is set)
n_s = words(strategies)
n_rows = int((n_s + 2) / 3)
fig_w = 1600; fig_h = 120 + 400 * n_rows
load gpdir."/style.gp"
set multiplot layout n_rows, 3 title sprintf("{/:Bold Memory of rank 0 over one step} (predicted: %s, W = %d, sim %s, %s; single: one rank, the global batch)", pred_model, pred_w, pred_hw, gpu_dtypes) font ",16"
set xlabel "time since the step's start (ms)"
set ylabel "memory (GiB)"
set style fill solid 0.9 noborder
set key top right font ",9" box opaque samplen 1.5 maxrows 4
set yrange [0:*]
set offsets 0, 0, graph 0.22, 0
do for [i=1:n_s] {
  s = word(strategies, i)
  set title s
  if (i > 1) { unset key }  # one legend, in the first panel
  f = data."/memory_timeline_".s.".csv"
  plot for [k=8:1:-1] f using "t_ms":(column(M_COL[k])) with filledcurves x1 lc rgb M_COLOR[k] title M_NAME[k]
}
unset multiplot
