"""Tools over whole scenarios: the fault matrix, benchmarks, perf baselines, the release matrix."""
