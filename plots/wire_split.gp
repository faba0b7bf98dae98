# Figure 8: bytes one rank puts on the wire per step, intra-node and inter-node, for every
# registered strategy as it runs and for each that takes --mesh on a mesh of R x a node (shard
# groups inside a node, replicas across nodes). Predicted by the simulator's ledger (8B on 64
# H100s, 8 per node): the split is fb_coll_wire_split's, the hierarchical rule the cost model
# prices (of the W - 1 hops of a collective over W ranks on k nodes, k - 1 cross nodes).
# Reads data/wire_split_pred.csv by column name (make_plots.sh).
fig_w = 1500; fig_h = 680
load gpdir."/style.gp"
set title sprintf("{/:Bold Bytes on the wire per step and rank: intra- vs inter-node}\n{/*0.85 predicted (exact ledger): %s model, W = %d, sim %s, %d ranks per node; %s; mesh runs: --mesh %s}", pred_model, pred_w, pred_hw, pred_node, gpu_dtypes, pred_mesh) font ",15"
set style data histograms
set style histogram rowstacked
set style fill solid 0.95 border rgb "#404040"
set boxwidth 0.6
set grid noxtics ytics
set xtics nomirror scale 0 rotate by -30 font ",11"
set bmargin 6
set ylabel "wire bytes per step per rank (GB)"
set yrange [0:*]
set offsets 0, 0, graph 0.15, 0
set key top right reverse Left samplen 1.5 font ",11" box opaque
f = data."/wire_split_pred.csv"
plot f using "intra_gb":xtic(strcol("strategy")) lc rgb "#6baed6" title "intra-node (NVLink)", \
     f using "inter_gb" lc rgb "#e6550d" title "inter-node (network)", \
     f using (column(0)):(column("intra_gb") + column("inter_gb")):(sprintf("%.1f\n{/*0.8 inter %.1f}", column("intra_gb") + column("inter_gb"), column("inter_gb"))) with labels offset 0, 1.4 font ",10" notitle
