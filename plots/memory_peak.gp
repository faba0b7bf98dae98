# Figure 1: peak memory per rank by strategy, stacked by category (each category's bytes at
# the moment the rank's total peaked; exact, no statistic). Left: executed on this CPU (debug
# model, fp32); right: predicted by the simulator (8B on 64 H100s, bf16 params, fp32 reduce)
# with the device's capacity as a line.
# Reads data/memory_peak_exec.csv and data/memory_peak_pred.csv by column name (make_plots.sh).
fig_w = 1500; fig_h = 680
load gpdir."/style.gp"
set multiplot layout 1, 2 title "{/:Bold Peak memory per rank by strategy, stacked by category} {/*0.8 (bytes of each category at the rank's peak)}" font ",16"
set style data histograms
set style histogram rowstacked
set style fill solid 0.95 border rgb "#404040"
set boxwidth 0.6
set grid noxtics ytics
set xtics nomirror scale 0 rotate by -30 font ",11"
set bmargin 5

set title sprintf("measured on this CPU: debug model (3.4M params), W = %d\n{/*0.85 %d × %d tokens per step, %s; single: one rank, the same batch}", exec_w, exec_batch, exec_seq, cpu_dtypes)
set ylabel "memory per rank at its peak (MiB)"
set yrange [0:*]
set offsets 0, 0, graph 0.35, 0
f = data."/memory_peak_exec.csv"
unset key
plot for [k=1:8] f using (column(M_COL[k])):xtic(strcol("strategy")) lc rgb M_COLOR[k] notitle, \
     f using (column(0)):"total":(sprintf("%.1f", column("total"))) with labels offset 0, 0.7 font ",10" notitle

set title sprintf("predicted: %s model, W = %d, sim %s\n{/*0.85 %s}", pred_model, pred_w, pred_hw, gpu_dtypes)
set ylabel "memory per rank at its peak (GiB)"
set key top right reverse Left samplen 1.5 font ",10" box opaque
f = data."/memory_peak_pred.csv"
set arrow 1 from graph 0, first cap to graph 1, first cap nohead dt 2 lw 2 lc rgb "#c00000" front
set label 1 sprintf("device capacity %.1f GiB", cap) at graph 0.02, first cap offset 0, 0.8 tc rgb "#c00000" font ",11" front
plot for [k=1:8] f using (column(M_COL[k])):xtic(strcol("strategy")) lc rgb M_COLOR[k] title M_NAME[k], \
     f using (column(0)):"total":(sprintf("%.0f%s", column("total"), strcol("status") eq "ok" ? "" : "\nno fit")) with labels offset 0, 1.2 font ",10" notitle
unset arrow 1
unset label 1
unset multiplot
