"""Benchmarks (`./dev bench` runs each script); a package so one can import another."""
