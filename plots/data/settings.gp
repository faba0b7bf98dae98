# written by plots/make_plots.sh: what ran, for the figure scripts' titles
strategies = "single ddp zero3 fsdp yafsdp fsdp2 zero1 zero2 hsdp zeropp"
dp_strategies = "ddp zero3 fsdp yafsdp fsdp2 zero1 zero2 hsdp zeropp"
grid_strategies = "ddp zero3 fsdp yafsdp fsdp2 zero1 zero2 hsdp zeropp"
exec_w = 4; exec_seq = 128; exec_batch = 4; exec_steps = 12
exec_dtype = "fp32"
pred_model = "8B"
pred_hw = "h100"
pred_w = 64; pred_steps = 4; sim_seq = 1024; cap = 80
pred_node = 8
pred_mesh = "8x8"
pred_param_dtype = "bf16"
pred_reduce_dtype = "fp32"
sweep_seq = 256; grid_wmax = 4
grid_desc = "ddp,zero3,fsdp,yafsdp,fsdp2,zero1,zero2,hsdp,zeropp x W 1,2,3,4 x seq 64,256"
cal_err = "22% (72 points)"
sums = "final parameter sums equal bit for bit (2296.9486150565681); max |loss - single loss| = 0"
dev_summary = "217 rows, median |err| 4.3%, worst 30.1%, within 15%: 209/217"
