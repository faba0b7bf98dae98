# Figure 1: peak memory per rank by strategy, stacked by category (each category's bytes at
# the moment the rank's total peaked). Left: executed on this CPU (debug model); right:
# predicted by the simulator (8B on 64 H100s) with the device's capacity as a line.
# Reads data/memory_peak_exec.csv and data/memory_peak_pred.csv (plots/make_plots.sh).
fig_w = 1400; fig_h = 620
load gpdir."/style.gp"
set multiplot layout 1, 2 title "{/:Bold Peak memory per rank by strategy, stacked by category}" font ",16"
set style data histograms
set style histogram rowstacked
set style fill solid 0.95 border rgb "#404040"
set boxwidth 0.6
set grid noxtics ytics
set xtics nomirror scale 0

set title sprintf("measured: debug model (3.4M params), W = %d, seq %d, CPU", exec_w, exec_seq)
set ylabel "memory per rank at its peak (MiB)"
set yrange [0:*]
set offsets 0, 0, graph 0.35, 0
f = data."/memory_peak_exec.csv"
unset key
plot for [i=2:9] f using i:xtic(1) lc rgb M_COLOR[i-1] notitle, \
     f using 0:10:(sprintf("%.1f", $10)) with labels offset 0, 0.7 font ",11" notitle

set title sprintf("predicted: %s model, W = %d, sim %s", pred_model, pred_w, pred_hw)
set ylabel "memory per rank at its peak (GiB)"
set key top right reverse Left samplen 1.5 font ",11" box opaque
f = data."/memory_peak_pred.csv"
set arrow 1 from graph 0, first cap to graph 1, first cap nohead dt 2 lw 2 lc rgb "#c00000" front
set label 1 sprintf("device capacity %.1f GiB", cap) at graph 0.02, first cap offset 0, 0.8 tc rgb "#c00000" font ",11" front
plot for [i=2:9] f using i:xtic(1) lc rgb M_COLOR[i-1] title M_NAME[i-1], \
     f using 0:10:(sprintf("%.1f%s", $10, strcol(11) eq "ok" ? "" : "\ndoes not fit")) with labels offset 0, 1.2 font ",11" notitle
unset arrow 1
unset label 1
unset multiplot
