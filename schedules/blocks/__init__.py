"""Schedule pieces several solvers share (BLIS GEMM, NCHWc, Winograd, GPU
mappings, RNN cells); no dispatch."""
