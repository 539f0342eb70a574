"""``benchmarks/_report.replace_section``: a benchmark regenerating its section of BENCHMARKS.md
keeps the other sections and the hand-written notes below the section's notes line."""
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from _report import NOTES, replace_section  # noqa: E402


def test_a_regenerated_section_keeps_its_notes_and_the_other_sections(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## Suite\n\n| a | 1 |\n\n" + NOTES + "\n\nWhy case x fails.\n\n"
                    "### A probe\n\nIts numbers.\n\n## Other\n\nKept.\n")
    replace_section("Suite", "## Suite\n\n| a | 2 |\n", path)
    text = path.read_text()
    assert "| a | 2 |" in text and "| a | 1 |" not in text
    assert text.index("| a | 2 |") < text.index(NOTES) < text.index("### A probe") < text.index(
        "## Other")
    assert "Why case x fails." in text and "Its numbers." in text and text.endswith("Kept.\n")
    # a section without notes is replaced whole, and one not there yet is appended
    replace_section("Other", "## Other\n\nNew.\n", path)
    replace_section("Third", "## Third\n\nAppended.\n", path)
    text = path.read_text()
    assert "Kept." not in text and "New." in text and text.endswith("## Third\n\nAppended.\n")
    assert text.count(NOTES) == 1
