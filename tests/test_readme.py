"""The README states what the code declares, so the docs cannot drift from the app."""

from pathlib import Path

from lab.models.registry import FAMILIES, family

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_quotes_each_familys_quantization_declaration():
    for name in FAMILIES:
        assert f"| `{name}` | {family(name).quantization}. |" in README, name


def test_readme_shows_no_speed_up_against_a_cold_baseline():
    assert "22.4x" not in README
    assert "**cold**" in README and "not* the strongest peer" in README


def test_readme_states_each_familys_unsupported_knobs_with_the_declared_reason():
    for name in FAMILIES:
        row = next(line for line in README.splitlines() if line.startswith(f"| `{name}` | "))
        for knob, reason in family(name).unsupported.items():
            assert f"`{knob}`" in row and reason in row, (name, knob)
