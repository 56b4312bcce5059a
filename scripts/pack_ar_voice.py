"""A folder that carries the lab's voice to a machine without the default voice's package:

    python scripts/pack_ar_voice.py runs/arvoice
    lab serve --preset ar-voice-gpu --set model=runs/arvoice

The shipped weights (LM, codebooks, learned decoder) beside `voice/`, an fp32 export of the
teacher that keeps only its generator and its settings (`lab.models.voice_backend.pack_folder`);
the rest is zeros, so the folder compresses to about 11 MB with `tar -cJ`, against some 60 MB
for a whole export. The machine still needs espeak-ng's phonemizer (`piper-phonemize-cross`) to
read text.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.models.voice_backend import pack_folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    print(f"wrote {pack_folder(parser.parse_args().out)}")


if __name__ == "__main__":
    main()
