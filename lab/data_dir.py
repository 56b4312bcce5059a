"""Where the lab keeps what outlives a process: votes, reports, traces and measured rates.

The app and the CLI read and write the same folder, so a rate measured by `lab synth` is the
one the app's next estimate uses.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DATA_DIR = Path("runs") / "lab-data"


def data_dir(explicit: str | Path | None = None) -> Path:
    """`explicit`, else $LAB_DATA_DIR, else runs/lab-data under the working directory."""
    return Path(explicit or os.environ.get("LAB_DATA_DIR") or DEFAULT_DATA_DIR)
