"""Cap sweeps: the raw training samples and their CSV format (``xtc-sweep/1``).

A sweep holds, for one or more offered packet rates, the packet rate a virtual
router forwarded while its CPU cap was held at each of several values.  It is
what ``xtc train collect`` writes and what ``xtc train fit`` reads; a sweep
recorded by other means is equally valid input as long as it follows the
schema in ``docs/training-csv.md``:

* optional leading metadata lines ``# key: value`` (hardware, traffic, date...),
* a header row naming the columns,
* one row per sample, in the order the samples were taken.

Required columns: ``offered_pps``, ``cap_percent``, ``sample_index``,
``forwarded_pps``, ``duration_s``.  Optional: ``settling`` (1 for samples
taken while the VR was still settling after a cap change, 0 otherwise; default
0), ``time_s`` (seconds since the start of the sweep at the end of the
sample; default: the running sum of ``duration_s``) and ``measured_offered_pps``
(the rate actually handed to the VR during the sample, host-side TX of its
interfaces, packets/s; ``offered_pps`` is the nominal rate that groups the
samples).

Parsing is pure (:func:`parse_sweep_csv` takes text); :func:`read_sweep_csv`
and :func:`write_sweep_csv` are the thin file layer.  Any defect raises
:class:`SweepError` with the line and column and what to do about it.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

__all__ = [
    "SWEEP_SCHEMA",
    "REQUIRED_COLUMNS",
    "OPTIONAL_COLUMNS",
    "TrainingError",
    "SweepError",
    "SweepSample",
    "Sweep",
    "parse_sweep_csv",
    "read_sweep_csv",
    "format_sweep_csv",
    "write_sweep_csv",
    "sha256_of_file",
]

SWEEP_SCHEMA = "xtc-sweep/1"
REQUIRED_COLUMNS = ("offered_pps", "cap_percent", "sample_index", "forwarded_pps", "duration_s")
OPTIONAL_COLUMNS = ("settling", "time_s", "measured_offered_pps")
CAP_MIN_PERCENT = 1.0
CAP_MAX_PERCENT = 100.0


class TrainingError(ValueError):
    """Training input or result that cannot be used; the message says what is wrong and what to do."""


class SweepError(TrainingError):
    """A sweep CSV (or sweep value) is invalid."""


@dataclass(frozen=True)
class SweepSample:
    """One throughput sample of a sweep.

    Parameters
    ----------
    offered_pps : float
        Packet rate offered to the VR during the sweep, packets/s.
    cap_percent : float
        CPU cap in force during the sample, percent of one CPU (1..100).
    sample_index : int
        Index of the sample since the cap was last set (0 = first sample after the change).
    forwarded_pps : float
        Packet rate the VR forwarded during the sample, packets/s.
    duration_s : float
        Length of the sample interval, seconds.
    settling : bool
        True when the sample was taken during the settle time after a cap change.
    time_s : float
        Seconds since the start of the sweep at the end of the sample.
    measured_offered_pps : float
        Packet rate actually handed to the VR during the sample (host-side TX of its
        interfaces), packets/s; NaN when not measured.
    """

    offered_pps: float
    cap_percent: float
    sample_index: int
    forwarded_pps: float
    duration_s: float
    settling: bool = False
    time_s: float = math.nan
    measured_offered_pps: float = math.nan


@dataclass(frozen=True)
class Sweep:
    """A cap sweep: samples in the order they were taken, plus metadata (strings)."""

    samples: tuple[SweepSample, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.samples:
            raise SweepError("the sweep has no samples; record a sweep with `xtc train collect` first")

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def offered_rates_pps(self) -> tuple[float, ...]:
        """Distinct offered rates in order of first appearance (packets/s)."""
        seen: dict[float, None] = {}
        for s in self.samples:
            seen.setdefault(s.offered_pps, None)
        return tuple(seen)

    def for_offered(self, offered_pps: float) -> "Sweep":
        """The samples taken at one offered rate, in recording order."""
        sel = tuple(s for s in self.samples if s.offered_pps == offered_pps)
        if not sel:
            rates = ", ".join(f"{r:g}" for r in self.offered_rates_pps)
            raise SweepError(f"no samples at offered_pps={offered_pps:g}; the sweep has {rates}")
        return Sweep(sel, self.metadata)

    def arrays(self) -> dict[str, np.ndarray]:
        """Columns as numpy arrays (``settling`` as bool)."""
        return {
            "offered_pps": np.array([s.offered_pps for s in self.samples], dtype=float),
            "cap_percent": np.array([s.cap_percent for s in self.samples], dtype=float),
            "sample_index": np.array([s.sample_index for s in self.samples], dtype=int),
            "forwarded_pps": np.array([s.forwarded_pps for s in self.samples], dtype=float),
            "duration_s": np.array([s.duration_s for s in self.samples], dtype=float),
            "settling": np.array([s.settling for s in self.samples], dtype=bool),
            "time_s": np.array([s.time_s for s in self.samples], dtype=float),
            "measured_offered_pps": np.array([s.measured_offered_pps for s in self.samples], dtype=float),
        }


def _parse_number(text: str, column: str, line: int) -> float:
    try:
        v = float(text)
    except ValueError:
        raise SweepError(
            f"line {line}, column '{column}': '{text}' is not a number; "
            "every value in a sweep CSV must be numeric (see docs/training-csv.md)"
        ) from None
    if not math.isfinite(v):
        raise SweepError(f"line {line}, column '{column}': value {text} is not finite; remove or re-record that sample")
    return v


def parse_sweep_csv(text: str, source: str = "<sweep>") -> Sweep:
    """Parse and validate the text of a sweep CSV.

    Parameters
    ----------
    text : str
        The whole file: optional ``# key: value`` metadata lines, a header row, data rows.
    source : str
        Name used in error messages (usually the path).

    Returns
    -------
    Sweep
        The samples in file order and the metadata.

    Raises
    ------
    SweepError
        On missing columns, non-numeric or non-finite values, caps outside 1..100,
        negative rates, non-positive durations or an empty file.
    """
    metadata: dict[str, str] = {}
    lines = text.splitlines()
    body_start = 0
    for i, ln in enumerate(lines):
        st = ln.strip()
        if st.startswith("#"):
            content = st[1:].strip()
            if ":" in content:
                k, v = content.split(":", 1)
                metadata[k.strip()] = v.strip()
            elif content:
                metadata.setdefault("schema", content)
            body_start = i + 1
        elif not st:
            body_start = i + 1
        else:
            break
    reader = csv.reader(io.StringIO("\n".join(lines[body_start:])))
    try:
        header = next(reader)
    except StopIteration:
        raise SweepError(f"{source}: no header row and no samples; expected columns {', '.join(REQUIRED_COLUMNS)}") from None
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise SweepError(
            f"{source}: missing column(s) {', '.join(missing)}; a sweep CSV needs "
            f"{', '.join(REQUIRED_COLUMNS)} (see docs/training-csv.md)"
        )
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise SweepError(f"{source}: column(s) {', '.join(dup)} appear more than once in the header")
    col = {name: header.index(name) for name in header}
    samples: list[SweepSample] = []
    elapsed = 0.0
    for rownum, row in enumerate(reader):
        line = body_start + 2 + rownum
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise SweepError(f"{source}: line {line} has {len(row)} fields, the header has {len(header)}")
        v = {name: _parse_number(row[idx].strip(), name, line) for name, idx in col.items()
             if name in REQUIRED_COLUMNS or name in OPTIONAL_COLUMNS}
        cap = v["cap_percent"]
        if not (CAP_MIN_PERCENT <= cap <= CAP_MAX_PERCENT):
            raise SweepError(
                f"{source}: line {line}: cap_percent {cap:g} is outside 1..100 (percent of one CPU); "
                "caps are percent of one CPU, e.g. 25 for a quarter of a core"
            )
        for name in ("offered_pps", "forwarded_pps", "measured_offered_pps"):
            if v.get(name, 0.0) < 0:
                raise SweepError(f"{source}: line {line}: {name} {v[name]:g} is negative; rates are packets/s >= 0")
        if v["offered_pps"] == 0:
            raise SweepError(f"{source}: line {line}: offered_pps is 0; a sweep needs traffic offered to the VR")
        if v["duration_s"] <= 0:
            raise SweepError(f"{source}: line {line}: duration_s {v['duration_s']:g} must be > 0 seconds")
        idx = v["sample_index"]
        if idx < 0 or idx != int(idx):
            raise SweepError(f"{source}: line {line}: sample_index {idx:g} must be a non-negative integer")
        settling = v.get("settling", 0.0)
        if settling not in (0.0, 1.0):
            raise SweepError(f"{source}: line {line}: settling must be 0 or 1, got {settling:g}")
        elapsed += v["duration_s"]
        samples.append(
            SweepSample(
                offered_pps=v["offered_pps"],
                cap_percent=cap,
                sample_index=int(idx),
                forwarded_pps=v["forwarded_pps"],
                duration_s=v["duration_s"],
                settling=bool(settling),
                time_s=v.get("time_s", elapsed),
                measured_offered_pps=v.get("measured_offered_pps", math.nan),
            )
        )
    if not samples:
        raise SweepError(f"{source}: the header is there but there are no samples")
    return Sweep(tuple(samples), metadata)


def read_sweep_csv(path: str | Path) -> Sweep:
    """Read and validate a sweep CSV file (see :func:`parse_sweep_csv`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SweepError(f"{p}: no such file; give the CSV written by `xtc train collect`") from None
    except OSError as e:
        raise SweepError(f"{p}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise SweepError(f"{p}: not UTF-8 text; a sweep is a CSV text file") from None
    return parse_sweep_csv(text, source=str(p))


def format_sweep_csv(samples: Iterable[SweepSample], metadata: Mapping[str, str] | None = None) -> str:
    """The CSV text of a sweep (metadata lines, header, rows), readable by :func:`parse_sweep_csv`.

    The ``measured_offered_pps`` column is written only when every sample has a finite value.
    """
    samples = list(samples)
    with_offered = bool(samples) and all(math.isfinite(s.measured_offered_pps) for s in samples)
    out = io.StringIO()
    out.write(f"# {SWEEP_SCHEMA}\n")
    for k, v in (metadata or {}).items():
        if k == "schema":
            continue
        if "\n" in str(v) or ":" in k or not k:
            raise SweepError(f"metadata key {k!r} or its value cannot be written as a '# key: value' line")
        out.write(f"# {k}: {v}\n")
    w = csv.writer(out, lineterminator="\n")
    columns = [*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS]
    if not with_offered:
        columns.remove("measured_offered_pps")
    w.writerow(columns)
    for s in samples:
        row = [
            f"{s.offered_pps:.6g}", f"{s.cap_percent:.6g}", s.sample_index, f"{s.forwarded_pps:.3f}",
            f"{s.duration_s:.6g}", int(s.settling), f"{s.time_s:.3f}",
        ]
        if with_offered:
            row.append(f"{s.measured_offered_pps:.3f}")
        w.writerow(row)
    return out.getvalue()


def write_sweep_csv(path: str | Path, samples: Sequence[SweepSample], metadata: Mapping[str, str] | None = None) -> None:
    """Write a sweep CSV atomically (temporary file, then rename)."""
    p = Path(path)
    text = format_sweep_csv(samples, metadata)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(p)


def sha256_of_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()
