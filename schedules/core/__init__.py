"""The floor under every solver: arrays in and out, the compiled-kernel
table, the Solver base and the one find step."""
