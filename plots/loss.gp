# Figure 6: training loss per step of every strategy on the same model, data and seed (rank 0;
# a per-step value, no statistic), overlaid: the curves coincide (the strategies compute the
# same step). Lines are drawn thick to thin so each stays visible under the next.
# Reads data/loss_exec.csv by column name (make_plots.sh).
fig_w = 1000; fig_h = 650
load gpdir."/style.gp"
set title sprintf("{/:Bold Loss per step, all strategies overlaid}\n{/*0.8 measured: debug model, W = %d, seq %d, %s, CPU}\n{/*0.8 %s}", exec_w, exec_seq, cpu_dtypes, sums) font ",15"
set xlabel "step"
set xtics 1
set mxtics 1
set ylabel "training loss (mean token cross-entropy, nats)"
set key top right font ",11" box opaque
f = data."/loss_exec.csv"
n_s = words(strategies)
plot for [i=1:n_s] f using "step":(column(word(strategies, i))) with linespoints \
       lw (1 + (n_s - i) * 0.7) ps (0.5 + (n_s - i) * 0.25) pt s_pt(word(strategies, i)) \
       dt s_dt(word(strategies, i)) lc rgb s_color(word(strategies, i)) title word(strategies, i)
