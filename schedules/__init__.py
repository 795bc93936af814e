"""The operator library: algorithms written in tiramisu_py with tuned
schedules (GEMM, convolutions, sparse conv, LSTM).  Uses only the public API."""
