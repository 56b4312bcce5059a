"""Start the TTS Optimization Lab app on this machine (127.0.0.1).

    python app.py [--port 7860] [--data-dir runs/lab-data] [--no-warm]

The port also comes from LAB_PORT, the data directory (votes, benchmark reports, traces)
from LAB_DATA_DIR.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from lab.ui import launch


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the TTS Optimization Lab app.")
    parser.add_argument("--port", type=int, default=int(os.environ.get("LAB_PORT", 7860)))
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where votes, reports and traces are kept "
                             "(default: $LAB_DATA_DIR or runs/lab-data)")
    parser.add_argument("--no-warm", action="store_true",
                        help="skip loading the default pipeline before the server starts")
    args = parser.parse_args()
    launch(port=args.port, data_dir=args.data_dir, warm=not args.no_warm)


if __name__ == "__main__":
    main()
