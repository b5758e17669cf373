"""Benchmarks: training speed and MFU, decoding speed, peak memory, load on the served model.

How they measure and what they write: docs/benchmarks.md.
"""
