"""What a compiled kernel runs with: the Kernel, array shapes, memory checks, device
arrays, the CUDA kernel and the torch bridge."""
