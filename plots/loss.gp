# Figure 6: training loss per step of every strategy on the same model, data and seed,
# overlaid: the curves coincide (the strategies compute the same step).
# Reads data/loss_exec.csv (plots/make_plots.sh).
fig_w = 1000; fig_h = 650
load gpdir."/style.gp"
set title sprintf("{/:Bold Loss per step, all strategies overlaid}\n{/*0.8 measured: debug model, W = %d, seq %d, CPU}\n{/*0.8 %s}", exec_w, exec_seq, sums) font ",15"
set xlabel "step"
set xtics 1
set mxtics 1
set ylabel "training loss (mean token cross-entropy, nats)"
set key top right font ",12" box opaque
f = data."/loss_exec.csv"
plot for [i=1:4] f using 1:i+1 with linespoints lw (5 - i) * 1.2 ps (5 - i) * 0.5 pt S_PT[i] dt S_DT[i] lc rgb S_COLOR[i] title columnheader(i+1)
