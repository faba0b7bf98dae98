# Shared look of every figure: the terminal (PNG through cairo, or SVG, chosen by `term`), fonts,
# grid, and one colour per strategy and per memory category, so the figures read alike.
# Each figure script sets fig_w, fig_h (pixels) and loads this file; it draws nothing itself.
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
# strategies: ddp, zero3, fsdp, yafsdp
array S_NAME[4] = ["ddp", "zero3", "fsdp", "yafsdp"]
array S_COLOR[4] = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"]
array S_PT[4] = [7, 5, 8, 13]       # fsdp: an open triangle, drawn larger, so it shows where
array S_PS[4] = [1.3, 1.3, 2.3, 1.1] # it coincides with yafsdp
array S_DT[4] = [1, 1, 2, 4]
# memory categories, bottom to top of a stack (the order of the data files' columns)
array M_NAME[8] = ["param shard", "grad shard", "optimizer state", "param full (gathered)", \
                   "grad full (unsharded)", "activations", "comm buffers", "temporaries"]
array M_COLOR[8] = ["#08519c", "#6baed6", "#c6dbef", "#e6550d", "#fdae6b", "#31a354", \
                    "#756bb1", "#969696"]
