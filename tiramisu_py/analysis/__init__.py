"""What the compiler proves about a schedule: legality (dependences), the GPU plan and
its checks, bounds."""
