"""Docs are filed by reader: a dated log or a commit hash belongs under docs/results/ and nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

DATE = re.compile(r"(?<![\w.-])(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])(?![\w])")
#: 7 to 40 hexadecimal digits with at least one digit and one letter (a word such as "deadbeef" or a
#: number such as "1000000" is not a hash).
HASH = re.compile(r"(?<![\w/.#-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")


#: A link into docs/results/, or a path there (its directories are named by date), may name a date.
RESULTS_LINK = re.compile(r"\]\([^)\s]*results/[^)\s]*\)|results/(19|20)\d\d-\d\d-\d\d-[\w.-]+")


def offences(text: str) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        line = RESULTS_LINK.sub("]()", line)
        for m in DATE.finditer(line):
            found.append(f"line {n}: date {m.group(0)}")
        for m in HASH.finditer(line):
            found.append(f"line {n}: commit hash {m.group(0)}")
    return found


def test_the_checker_finds_dates_and_hashes() -> None:
    assert offences("Measured 2026-11-24, at commit 3f9c2ab.") == ["line 1: date 2026-11-24",
                                                                    "line 1: commit hash 3f9c2ab"]
    assert offences("cap 100000000, 0xdeadbeef0, sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") \
        == []
    assert offences("a cap of 25 % for 1e10 pps; the range 1..100; deadbeef; 2026-13-01") == []
    assert offences("[the log](../results/2026-11-26-lab/README.md), not [this](../guide/2026-11-26.md)") \
        == ["line 1: date 2026-11-26"]
    assert offences("(docs/results/2026-11-26-lab/README.md, \"The CFS period\")") == []


def test_no_page_outside_results_carries_a_date_or_a_commit_hash() -> None:
    bad = []
    for page in sorted(DOCS.rglob("*.md")):
        rel = page.relative_to(DOCS)
        if rel.parts[0] == "results":
            continue
        bad += [f"docs/{rel} {o}" for o in offences(page.read_text())]
    assert not bad, "move dated logs to docs/results/<date>-<topic>/:\n" + "\n".join(bad)
