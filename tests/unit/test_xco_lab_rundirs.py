"""The XCo lab's run directories: the newest kept, old ones removed, young ones never."""

from __future__ import annotations

import os
from pathlib import Path

from xtc_lab.xco.experiments import prune_run_dirs


def test_prune_keeps_the_newest_and_the_young(tmp_path: Path) -> None:
    now = 1_000_000.0
    for k in range(6):
        d = tmp_path / f"run{k}"
        d.mkdir()
        (d / "agent-s1.log").write_text("x")
        age = 7200 if k < 4 else 60  # run0..run3 two hours old, run4 and run5 a minute
        os.utime(d, (now - age - k, now - age - k))
    (tmp_path / "a-file").write_text("not a run")
    gone = prune_run_dirs(tmp_path, keep=1, keep_s=3600, now_s=now)
    # run5 and run4 are the youngest and are kept whatever ``keep`` says; of the old ones none is
    # among the newest one, so all four go
    assert sorted(p.name for p in gone) == ["run0", "run1", "run2", "run3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "run4", "run5"]
    # with a larger ``keep`` nothing old within it is removed
    for k in range(3):
        (tmp_path / f"old{k}").mkdir()
        os.utime(tmp_path / f"old{k}", (now - 9000 - k, now - 9000 - k))
    gone = prune_run_dirs(tmp_path, keep=4, keep_s=3600, now_s=now)
    assert [p.name for p in gone] == ["old2"]
