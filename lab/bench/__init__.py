"""Benchmarks: run a text set at several settings, sweep one knob, fit scaling, write reports."""
