"""The README states what the code declares, so the docs cannot drift from the app."""

from pathlib import Path

from lab.models.families import FAMILIES

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_quotes_each_familys_quantization_declaration():
    for name, family in FAMILIES.items():
        assert f"| `{name}` | {family.quantization}. |" in README, name


def test_readme_shows_no_speed_up_against_a_cold_baseline():
    assert "22.4x" not in README
    assert "**cold**" in README and "not* the strongest peer" in README
