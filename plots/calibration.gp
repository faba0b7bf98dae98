# Figure 5: the simulator's calibration: the step time predicted with the cpu profile
# (models/hardware/cpu.yaml, from `fsdpbench calibrate`) against the step time measured on this
# machine for the same configuration (debug model, fp32; grid strategies x world x seq, one
# sequence per rank), both the median over the measured steps, with y = x and a ±25 % band.
# Reads data/calibration.csv by column name (make_plots.sh).
fig_w = 1000; fig_h = 850
load gpdir."/style.gp"
set title sprintf("{/:Bold Predicted vs measured step time}\n(median step; debug model, %s, this CPU)\n{/*0.85 median |error| %s over %s}", cpu_dtypes, cal_err, grid_desc) font ",13"
set xlabel "measured step time, median over steps (ms)"
set ylabel "predicted step time, sim with the cpu profile (ms)"
set logscale xy
set format x "%g"
set format y "%g"
set xtics (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
set ytics (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
f = data."/calibration.csv"
stats f using "measured_ms":"predicted_ms" nooutput
lo = (STATS_min_x < STATS_min_y ? STATS_min_x : STATS_min_y) / 1.5
hi = (STATS_max_x > STATS_max_y ? STATS_max_x : STATS_max_y) * 1.5
set xrange [lo:hi]
set yrange [lo:hi]
set size square
set key top left font ",11" box opaque
set samples 200  # (two samples would sit on the range corners and be clipped)
n_g = words(grid_strategies)
plot x with lines lw 1.5 lc rgb "#404040" title "y = x", \
     1.25 * x with lines dt 2 lc rgb "#909090" title "±25 %", \
     0.8 * x with lines dt 2 lc rgb "#909090" notitle, \
     for [i=1:n_g] f using "measured_ms":(strcol("strategy") eq word(grid_strategies, i) ? column("predicted_ms") : NaN) \
       with points ps 1.6 lw 2 pt s_pt(word(grid_strategies, i)) lc rgb s_color(word(grid_strategies, i)) \
       title word(grid_strategies, i)
