"""Benchmarks: each prints a table, writes bench/results/<name>.json, compares to a baseline."""
