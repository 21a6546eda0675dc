"""Benchmarks: the harness (timing, statistics, ceilings), the map suite, peers and reports."""
