# Figure 4: where a step's time goes for each strategy, one statistic throughout: the median
# step of rank 0 (the step whose wall time is the median over the measured steps, the first
# step left out when there are more than two) and that same step's compute (compute stream
# busy), exposed communication (comm not hidden behind compute) and the rest (idle: host work,
# launch gaps, waiting), which add up to its wall time. Left: executed on this CPU (fp32);
# right: predicted on H100s (bf16 params, fp32 reduce).
# Reads data/time_exec.csv and data/time_pred.csv by column name (make_plots.sh).
fig_w = 1500; fig_h = 680
load gpdir."/style.gp"
set multiplot layout 1, 2 title "{/:Bold Step time breakdown by strategy} {/*0.8 (the median step of rank 0; its parts add up to it)}" font ",16"
set style data histograms
set style histogram rowstacked
set style fill solid 0.95 border rgb "#404040"
set boxwidth 0.6
set grid noxtics ytics
set xtics nomirror scale 0 rotate by -30 font ",11"
set bmargin 5
set key top right reverse Left samplen 1.5 font ",11" box opaque
set ylabel "time of the median step (ms)"
steps_text(n) = n > 2 ? sprintf("the last %d of %d steps", n - 1, n) : sprintf("%d steps", n)
set style textbox opaque noborder margins 1, 1
array T_COL[3] = ["compute_ms", "exposed_ms", "idle_ms"]
array T_COLOR[3] = ["#4575b4", "#d73027", "#bdbdbd"]
array T_NAME[3] = ["compute", "exposed communication", "idle (step - compute - exposed)"]
do for [p=1:2] {
  if (p == 1) {
    set title sprintf("measured on this CPU: debug model, W = %d, seq %d\n{/*0.85 %s; the median of %s}", exec_w, exec_seq, cpu_dtypes, steps_text(exec_steps))
    f = data."/time_exec.csv"
  } else {
    set title sprintf("predicted: %s model, W = %d, sim %s\n{/*0.85 %s; the median of %s}", pred_model, pred_w, pred_hw, gpu_dtypes, steps_text(pred_steps))
    f = data."/time_pred.csv"
  }
  # a one-rank reference running the whole batch of W ranks (single at W = 64) would flatten
  # the others: above 2.5x the tallest data-parallel bar, its bar runs off the top, labelled
  set autoscale y  # (stats keeps to the current range: the last panel's)
  stats f using (is_dp(strcol("strategy")) ? column("step_ms") : NaN) name "DP" nooutput
  stats f using "step_ms" name "ALL" nooutput
  top = ALL_max > 2.5 * DP_max ? 1.45 * DP_max : 1.3 * ALL_max
  set yrange [0:top]
  set offsets 0, 0, 0, 0
  plot for [k=1:3] f using (column(T_COL[k])):xtic(strcol("strategy")) lc rgb T_COLOR[k] title T_NAME[k], \
       f using (column(0)):(column("step_ms") < 0.92 * top ? column("step_ms") : 0.92 * top):(sprintf("%.0f%s%s", \
         column("step_ms"), column("step_ms") < 0.92 * top ? "" : " (off scale)", strcol("status") eq "ok" ? "" : "\nno fit")) \
         with labels boxed offset 0, 1.2 font ",10" notitle
  unset key
}
unset multiplot
