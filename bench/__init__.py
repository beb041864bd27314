"""Benchmarks: `make bench` (quick) and `make bench-full` print markdown tables with baselines from the same run."""
