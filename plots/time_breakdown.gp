# Figure 4: where a step's time goes for each strategy: compute (compute stream busy),
# exposed communication (comm not hidden behind compute) and the rest (idle: host work,
# launch gaps, waiting). Left: executed on this CPU; right: predicted on H100s.
# Reads data/time_exec.csv and data/time_pred.csv (plots/make_plots.sh).
fig_w = 1400; fig_h = 620
load gpdir."/style.gp"
set multiplot layout 1, 2 title "{/:Bold Step time breakdown by strategy}" font ",16"
set style data histograms
set style histogram rowstacked
set style fill solid 0.95 border rgb "#404040"
set boxwidth 0.6
set grid noxtics ytics
set xtics nomirror scale 0
set key top left reverse Left samplen 1.5 font ",11" box opaque
set ylabel "time per step (ms)"
set yrange [0:*]
set offsets 0, 0, graph 0.3, 0
array T_COLOR[3] = ["#4575b4", "#d73027", "#bdbdbd"]
array T_NAME[3] = ["compute", "exposed communication", "idle (step - compute - exposed)"]
do for [p=1:2] {
  if (p == 1) {
    set title sprintf("measured: debug model, W = %d, seq %d, CPU", exec_w, exec_seq)
    f = data."/time_exec.csv"
  } else {
    set title sprintf("predicted: %s model, W = %d, sim %s", pred_model, pred_w, pred_hw)
    f = data."/time_pred.csv"
  }
  plot for [i=2:4] f using i:xtic(1) lc rgb T_COLOR[i-1] title T_NAME[i-1], \
       f using 0:5:(sprintf("%.1f ms%s", $5, strcol(6) eq "ok" ? "" : "\n(does not fit)")) with labels offset 0, 1.2 font ",11" notitle
}
unset multiplot
