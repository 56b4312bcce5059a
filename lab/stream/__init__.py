"""Streaming decode: fixed windows over latent frames, joined with a short crossfade."""

from lab.stream.crossfade import Crossfader
from lab.stream.windows import Window, plan_windows

__all__ = ["Crossfader", "Window", "plan_windows"]
