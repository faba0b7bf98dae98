# Figure 5: the simulator's calibration: the step time predicted with the cpu profile
# (models/hardware/cpu.yaml, from `fsdpbench calibrate`) against the step time measured on this
# machine for the same configuration (debug model; strategies x world 1..4 x seq 64, 256),
# with y = x and a ±25 % band.
# Reads data/calibration.csv (plots/make_plots.sh).
fig_w = 1000; fig_h = 850
load gpdir."/style.gp"
set title sprintf("{/:Bold Predicted vs measured step time} (debug model on this CPU; median |error| %s)", cal_err) font ",15"
set xlabel "measured step time (ms)"
set ylabel "predicted step time, sim with the cpu profile (ms)"
set logscale xy
set format x "%g"
set format y "%g"
set xtics (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
set ytics (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
f = data."/calibration.csv"
stats f using 4:5 nooutput
lo = (STATS_min_x < STATS_min_y ? STATS_min_x : STATS_min_y) / 1.5
hi = (STATS_max_x > STATS_max_y ? STATS_max_x : STATS_max_y) * 1.5
set xrange [lo:hi]
set yrange [lo:hi]
set size square
set key top left font ",11" box opaque
set samples 200  # (two samples would sit on the range corners and be clipped)
plot x with lines lw 1.5 lc rgb "#404040" title "y = x", \
     1.25 * x with lines dt 2 lc rgb "#909090" title "±25 %", \
     0.8 * x with lines dt 2 lc rgb "#909090" notitle, \
     for [i=1:4] f using 4:(strcol(1) eq S_NAME[i] ? $5 : NaN) with points ps 1.6 lw 2 pt S_PT[i] lc rgb S_COLOR[i] title S_NAME[i]
