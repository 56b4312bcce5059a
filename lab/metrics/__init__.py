"""Measurement: stage timers, GPU/CPU telemetry, the request event log and operator profiles."""
