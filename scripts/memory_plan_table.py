"""The server's memory plan for a preset on 24, 40, 80 and 141 GB cards, as a markdown table.

    python scripts/memory_plan_table.py --preset orpheus-3b-dummy-gpu [--preset ar-voice-gpu]
                                        [--out FILE]

Each row is `lab.serve.memory_plan.plan_for_card`: the plan `lab serve` would make at start on
that card (its nominal memory less the CUDA context), from the same sizer `lab.estimate` uses.
Nothing loads and no GPU is needed. The table goes to stdout, or to `--out`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.config import load_preset
from lab.estimate import HEADROOM, gib
from lab.serve.memory_plan import CARDS, CUDA_CONTEXT_BYTES, FRAGMENTATION, plan_for_card

HEADER = ("| card | free after context | may use | weights + codec | KV cache a slot "
          "(positions) | activations | slots | bound by | planned |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")


def row(card: str, size: int, preset: str) -> str:
    plan = plan_for_card(load_preset(preset), size)
    kv = (f"{gib(plan.kv_per_slot)} ({plan.cache_len})" if plan.cache_len else "none")
    return (f"| {card} | {gib(plan.free_bytes)} | {gib(plan.budget)} | "
            f"{gib(plan.weights + plan.codec)} | {kv} | {gib(plan.activations)} | "
            f"**{plan.slots}** | {plan.bound} | {gib(plan.planned)} |")


def table(preset: str) -> str:
    rows = [row(card, size, preset) for card, size in CARDS.items()]
    return "\n".join([f"`{preset}`:", "", HEADER, *rows, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", required=True,
                        help="a preset name or YAML path; repeat for several tables")
    parser.add_argument("--out", type=Path, help="write the tables here instead of stdout")
    args = parser.parse_args(argv)
    assumptions = (f"_Planned from free memory = card less {gib(CUDA_CONTEXT_BYTES)} of CUDA "
                   f"context; the plan may use {HEADROOM:.0%} of it; activations carry a "
                   f"{FRAGMENTATION:.0%} fragmentation margin._")
    text = "\n".join([*(table(p) for p in args.preset), assumptions, ""])
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
