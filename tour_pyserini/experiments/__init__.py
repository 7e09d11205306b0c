"""Benchmarks as data: an experiment file's rows run through the composition root, and their report."""
