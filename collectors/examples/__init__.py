"""Example workloads for `traceview collect`, each with a known bottleneck (see README.md here)."""
