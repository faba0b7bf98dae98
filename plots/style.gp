# Shared look of every figure: the terminal (PNG through cairo, or SVG, chosen by `term`), fonts,
# grid, one colour / point / dash per strategy and per memory category, so the figures read
# alike; and the run settings make_plots.sh wrote beside the data (data/settings.gp: which
# strategies ran, worlds, models, dtypes, the summary lines the titles quote).
# Each figure script sets fig_w, fig_h (pixels) and loads this file; it draws nothing itself.
# Data files are read by column name everywhere (tests/test_plots_columns.sh checks it).
load data."/settings.gp"
if (term eq "svg") {
  set terminal svg size fig_w, fig_h dynamic enhanced font "DejaVu Sans,13" background rgb "white"
} else {
  set terminal pngcairo size fig_w, fig_h enhanced font "DejaVu Sans,13" background rgb "white"
}
set output out
set datafile separator comma
set datafile missing "NaN"
set datafile columnheaders
set border lw 1.2
set grid lc rgb "#d0d0d0" lw 1
set key noautotitle
# strategies: the style of the i-th name of `strategies` (the registry's order, settings.gp), so
# a strategy looks the same in every figure whichever subset a panel shows
S_COLORS = "#404040 #1b9e77 #d95f02 #7570b3 #e7298a #66a61e #e6ab02 #a6761d #1f78b4 #b15928"
S_PTS = "4 7 5 8 13 9 11 10 6 12"
S_PSS = "1.2 1.3 1.3 2.3 1.1 1.3 1.3 1.3 1.3 1.3"  # fsdp: an open triangle drawn larger, so it
S_DTS = "1 1 1 2 4 3 5 1 2 4"                     # shows where it coincides with yafsdp
s_index_(s, i) = i > words(strategies) ? 10 : (word(strategies, i) eq s ? (i > 10 ? 10 : i) : s_index_(s, i + 1))
s_index(s) = s_index_(s, 1)
is_dp(s) = strstrt(" ".dp_strategies." ", " ".s." ") > 0  # not a one-rank reference
s_color(s) = word(S_COLORS, s_index(s))
s_pt(s) = int(word(S_PTS, s_index(s)))
s_ps(s) = real(word(S_PSS, s_index(s)))
s_dt(s) = int(word(S_DTS, s_index(s)))
# memory categories, bottom to top of a stack, and their column names in the data files
array M_COL[8] = ["param_shard", "grad_shard", "optim", "param_full", "grad_full", "act", "comm", "temp"]
array M_NAME[8] = ["param shard", "grad shard", "optimizer state", "param full (gathered)", \
                   "grad full (unsharded)", "activations", "comm buffers", "temporaries"]
array M_COLOR[8] = ["#08519c", "#6baed6", "#c6dbef", "#e6550d", "#fdae6b", "#31a354", \
                    "#756bb1", "#969696"]
# the dtype sentences of the titles
cpu_dtypes = sprintf("%s params and reduce", exec_dtype)
gpu_dtypes = sprintf("%s params, %s reduce", pred_param_dtype, pred_reduce_dtype)
