"""A quality report as Markdown: the verdict, each check with its interval, fidelity to the
baseline, and the worst sentences with both transcripts and links to their audio.

The same text goes into the app's quality check, the CLI and the benchmark tables, so a verdict
reads the same wherever it is met.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lab.quality import paired
from lab.quality.mos import mos_label
from lab.quality.worst import MIN_MOS_DROP

if TYPE_CHECKING:
    from lab.quality.report import Check, QualityReport


def method(report: QualityReport) -> str:
    """How the checks were judged, in one clause."""
    s = report.settings
    if report.sentences == 1:
        return ("one sentence: no spread to bootstrap, so each check compares two points; "
                "judge a sentence set for intervals")
    return (f"{s.get('confidence', paired.CONFIDENCE):.0%} paired bootstrap intervals over "
            f"sentences ({s.get('resamples', paired.RESAMPLES)} resamples)")


def headline(report: QualityReport) -> str:
    """"**Quality: PASS** on 12 sentences; ...": the outcome and how it was reached."""
    plural = "s" * (report.sentences != 1)
    return (f"**Quality: {report.outcome.upper()}** on {report.sentences} sentence{plural}; "
            f"{method(report)}.")


def report_markdown(report: QualityReport, audio: dict[int, dict[str, str]] | None = None,
                    k: int = 3, title: bool = True) -> str:
    """The whole report; `k=0` leaves out the worst sentences, `title=False` the headline
    (for a caller that shows both its own way)."""
    lines = [headline(report), ""] if title else []
    lines += ["| Check | Verdict | Baseline | Candidate | Change (95% CI) | Limit |",
              "|---|---|---|---|---|---|"]
    lines += [_check_row(check) for check in report.checks]
    if report.fidelity:
        lines += ["", "Fidelity to the baseline rendering, per sentence (mean and 95% CI):", "",
                  "| Measure | Mean (95% CI) | Better |", "|---|---|---|"]
        for s in report.fidelity:
            better = "higher" if s.higher_is_better else "lower"
            lines.append(f"| {s.name} | {s.mean:.3f} ({s.low:.3f} to {s.high:.3f}) | {better} |")
    if k > 0:
        lines += ["", *worst_markdown(report, audio, k)]
    return "\n".join(lines) + "\n"


def worst_markdown(report: QualityReport, audio: dict[int, dict[str, str]] | None = None,
                   k: int = 3) -> list[str]:
    worst = report.worst(k)
    if not worst:
        return ["**Worst sentences:** none got worse on WER or on any MOS proxy."]
    head = "| # | Why | Text | Baseline heard | Candidate heard | WER change | Largest MOS drop |"
    lines = ["**Worst sentences** (largest WER growth, largest MOS drop):", "",
             head + " Audio |" * bool(audio), "|---" * (7 + bool(audio)) + "|"]
    for w in worst:
        drop = (f"{mos_label(w.mos_field)} -{w.mos_drop:.2f}" if w.mos_drop >= MIN_MOS_DROP
                else "none")
        cells = [str(w.index + 1), ", ".join(w.reasons), _cell(w.text),
                 _cell(w.baseline_transcript) or "(nothing)",
                 _cell(w.candidate_transcript) or "(nothing)",
                 f"{w.wer_delta * 100:+.0f} points", drop]
        if audio:
            files = audio.get(w.index, {})
            cells.append(" · ".join(f"[{side}]({path})" for side, path in files.items()))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _check_row(check: Check) -> str:
    rate = check.metric in ("WER", "CER")
    if rate:
        base = f"{check.baseline:.1%} (ASR floor)"
        cand = f"{check.candidate:.1%}"
        change = (f"{check.delta * 100:+.1f} ({check.low * 100:+.1f} to "
                  f"{check.high * 100:+.1f}) points")
        limit = f"at most {check.limit * 100:+g} points"
    else:
        base, cand = f"{check.baseline:.2f}", f"{check.candidate:.2f}"
        change = f"{check.delta:+.3f} ({check.low:+.3f} to {check.high:+.3f})"
        limit = f"at least {check.limit:+.3f}"
    verdict = check.verdict if check.passed else f"**{check.verdict}**"
    return f"| {check.name} | {verdict} | {base} | {cand} | {change} | {limit} |"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
