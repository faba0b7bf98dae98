# Figure 7: the simulator against public GPU training runs (the development set,
# ../shared/gpu-data/train-runs.csv): predicted vs published tokens/s per GPU, one point per
# expressible row, coloured by the hardware profile it used, with y = x and a ±15 % band.
# Each row is predicted in its run's precision: bf16 params; fp32 gradient reduction, bf16
# for llm-foundry's pure-bf16 rows (apps/validate/validate_dataset.c).
# Reads data/gpu_validation.csv by column name (`fsdpbench validate --dataset ... --out`,
# plots/make_plots.sh).
fig_w = 1000; fig_h = 850
load gpdir."/style.gp"
set title sprintf("{/:Bold Predicted vs published training throughput}\n{/*0.85 %s}\n{/*0.8 bf16 params; fp32 reduce (bf16 for llm-foundry pure-bf16 rows), as each run}", dev_summary) font ",14"
set xlabel "published tokens/s per GPU (llm-foundry MPT, torchtitan Llama; A100, H100)"
set ylabel "predicted tokens/s per GPU (sim, GPU profiles)"
set logscale xy
set format x "%g"
set format y "%g"
f = data."/gpu_validation.csv"
stats f using "published":"predicted" nooutput
lo = (STATS_min_x < STATS_min_y ? STATS_min_x : STATS_min_y) / 1.5
hi = (STATS_max_x > STATS_max_y ? STATS_max_x : STATS_max_y) * 1.5
set xrange [lo:hi]
set yrange [lo:hi]
set size square
set key top left font ",11" box opaque
set samples 200
profs = "a100 a100-40gb h100"
cols = "#1f77b4 #2ca02c #d62728"
pts = "7 5 9"
plot x with lines lw 1.5 lc rgb "#404040" title "y = x", \
     1.15 * x with lines dt 2 lc rgb "#909090" title "±15 %", \
     x / 1.15 with lines dt 2 lc rgb "#909090" notitle, \
     for [p=1:words(profs)] f using "published":(strcol("profile") eq word(profs, p) ? column("predicted") : NaN) \
       with points ps 1.4 lw 2 pt int(word(pts, p)) lc rgb word(cols, p) title word(profs, p)
