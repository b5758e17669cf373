"""Benchmarks: training throughput and MFU, decoding speed, peak memory.

How it measures and what it writes: docs/benchmarks.md, `bench`.
"""
