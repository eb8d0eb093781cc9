"""The log-cap model of a virtual router and the model files the daemon loads.

The model (section 5 of the XTC paper) is a first-order linear system around an
operating point ``(ybar, ubar)``::

    y(k+1) = a * y(k) + b * u(k)

where ``y`` is the packet rate the VR forwards minus ``ybar`` (kp/s, thousands
of packets per second) and ``u`` is ``log10(cap) - ubar`` (cap in percent of one
CPU, so ``u`` is in decades of cap).  ``a`` is dimensionless, ``b`` is in kp/s
per decade of cap.

A model file (TOML) records the model, the hardware and traffic it was fitted
on, the controller gains derived from it and the cap bounds.  See
``xtc/models/paper.toml`` for a complete example and ``docs`` in the README for the
schema.  :func:`load_model` validates a file and raises :class:`ModelError`
naming the offending field; nothing is returned for a bad file.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping

import tomli_w
from pydantic import BeforeValidator, ConfigDict, Field, Strict, TypeAdapter
from pydantic import dataclasses as pyd

from xtc.validation import DocumentError, parse_toml, read_text_file, validate_document

__all__ = [
    "SCHEMA",
    "ModelError",
    "LogCapModel",
    "Gains",
    "CapBounds",
    "ModelFile",
    "load_model",
    "loads_model",
    "dumps_model",
    "save_model",
    "PAPER_MODEL",
    "PAPER_MODEL_PATH",
]

SCHEMA = "xtc-model/1"
CAP_FLOOR_PERCENT = 1.0
CAP_CEILING_PERCENT = 100.0

_log = logging.getLogger("xtc.models")


class ModelError(DocumentError):
    """A model file or model value is invalid.  ``field`` names the culprit."""

    key_label = "field "

    @property
    def field(self) -> str:
        """The culprit's key path (``model.a``)."""
        return self.key


@dataclass(frozen=True)
class LogCapModel:
    """First-order log-cap model ``y(k+1) = a y(k) + b u(k)``.

    Parameters
    ----------
    a : float
        Pole of the plant, dimensionless, ``0 <= a < 1``.
    b_kpps_per_decade : float
        Input gain, kp/s of throughput per decade (factor 10) of cap.
    ybar_kpps : float
        Operating-point throughput, kp/s.
    ubar_log10_cap : float
        Operating-point input, ``log10`` of the cap in percent of one CPU.
    period_s : float
        Sampling (control) period the model was fitted at, seconds.
    """

    a: float
    b_kpps_per_decade: float
    ybar_kpps: float
    ubar_log10_cap: float
    period_s: float = 1.0

    def __post_init__(self) -> None:
        _check_finite("model.a", self.a)
        if self.a < 0 or self.a >= 1:
            raise ModelError("model.a", f"must satisfy 0 <= a < 1 (a stable, non-oscillating plant), got {self.a}")
        _check_finite("model.b_kpps_per_decade", self.b_kpps_per_decade)
        if self.b_kpps_per_decade == 0:
            raise ModelError("model.b_kpps_per_decade", "must not be 0 (the cap would not affect throughput)")
        _check_finite("model.ybar_kpps", self.ybar_kpps)
        if self.ybar_kpps <= 0:
            raise ModelError("model.ybar_kpps", f"must be > 0 kp/s, got {self.ybar_kpps}")
        _check_finite("model.ubar_log10_cap", self.ubar_log10_cap)
        if not (0.0 <= self.ubar_log10_cap <= 2.0):
            raise ModelError(
                "model.ubar_log10_cap",
                f"must be log10 of a cap in 1..100 percent, i.e. within 0..2, got {self.ubar_log10_cap}",
            )
        _check_finite("model.period_s", self.period_s)
        if not (0.01 <= self.period_s <= 60):
            raise ModelError("model.period_s", f"must be within 0.01..60 s, got {self.period_s}")

    @property
    def static_gain_kpps_per_decade(self) -> float:
        """Steady-state throughput change per decade of cap, ``b / (1 - a)`` (kp/s)."""
        return self.b_kpps_per_decade / (1.0 - self.a)

    def steady_state_kpps(self, cap_percent: float) -> float:
        """Throughput the linear model predicts at equilibrium for a cap (kp/s)."""
        u = math.log10(cap_percent) - self.ubar_log10_cap
        return self.ybar_kpps + self.static_gain_kpps_per_decade * u

    def cap_for_kpps(self, kpps: float) -> float:
        """Cap (percent, unclamped) the linear model says gives ``kpps`` at equilibrium."""
        u = (kpps - self.ybar_kpps) / self.static_gain_kpps_per_decade
        return 10.0 ** (u + self.ubar_log10_cap)


@dataclass(frozen=True)
class Gains:
    """PI gains of the paper's law, in decades of cap per kp/s of error."""

    kp: float
    ki: float

    def __post_init__(self) -> None:
        _check_finite("kp", self.kp)
        _check_finite("ki", self.ki)


@dataclass(frozen=True)
class CapBounds:
    """Cap bounds in percent of one CPU, within 1..100 (a model file's ``[controller]``
    ``cap_min_percent`` and ``cap_max_percent``).

    ``cap_min_percent`` is the paper's cap_min (section 7.2.2): the cap floor every controller keeps to.
    """

    cap_min_percent: float = 1.0
    cap_max_percent: float = 100.0

    def __post_init__(self) -> None:
        for name in ("cap_min_percent", "cap_max_percent"):
            v = getattr(self, name)
            _check_finite(f"controller.{name}", v)
            if not (CAP_FLOOR_PERCENT <= v <= CAP_CEILING_PERCENT):
                raise ModelError(f"controller.{name}", f"must be within 1..100 percent of one CPU, got {v}")
        if self.cap_min_percent > self.cap_max_percent:
            raise ModelError(
                "controller.cap_min_percent",
                f"must not exceed controller.cap_max_percent ({self.cap_min_percent} > {self.cap_max_percent})",
            )


@dataclass(frozen=True)
class ModelFile:
    """Everything a model file holds."""

    name: str
    model: LogCapModel
    caps: CapBounds = field(default_factory=CapBounds)
    pi: Gains | None = None
    deadbeat: Gains | None = None
    dead_zone_fraction: float = 0.10
    r_squared: float | None = None
    cap_threshold_percent: float | None = None
    fitted_on: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ModelError("name", "must be a non-empty string")
        _check_finite("controller.dead_zone_fraction", self.dead_zone_fraction)
        if not (0.0 <= self.dead_zone_fraction < 1.0):
            raise ModelError(
                "controller.dead_zone_fraction",
                f"must be a fraction of the setpoint within 0..1, got {self.dead_zone_fraction}",
            )
        if self.r_squared is not None:
            _check_finite("model.r_squared", self.r_squared)
            if not (-1e9 < self.r_squared <= 1.0):
                raise ModelError("model.r_squared", f"must be <= 1, got {self.r_squared}")
        if self.cap_threshold_percent is not None:
            _check_finite("model.cap_threshold_percent", self.cap_threshold_percent)
            if not (1.0 <= self.cap_threshold_percent <= 100.0):
                raise ModelError(
                    "model.cap_threshold_percent", f"must be within 1..100 percent, got {self.cap_threshold_percent}"
                )

    def with_caps(self, cap_min_percent: float | None = None, cap_max_percent: float | None = None) -> "ModelFile":
        """A copy with other cap bounds."""
        caps = CapBounds(
            self.caps.cap_min_percent if cap_min_percent is None else cap_min_percent,
            self.caps.cap_max_percent if cap_max_percent is None else cap_max_percent,
        )
        return replace(self, caps=caps)


def _check_finite(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(name, f"must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ModelError(name, f"must be finite, got {value}")


# ------------------------------------------------------------------------------ the file's schema

# The tables and keys of a model file as written; the values are checked again by the classes
# above, which name the same fields.
_TABLE = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
_Number = Annotated[float, Strict()]
_Text = Annotated[str, Strict()]


@pyd.dataclass(config=_TABLE)
class _ModelTable:
    a: _Number
    b_kpps_per_decade: _Number
    ybar_kpps: _Number
    ubar_log10_cap: _Number
    period_s: _Number = 1.0
    r_squared: _Number | None = None
    cap_threshold_percent: _Number | None = None


@pyd.dataclass(config=_TABLE)
class _GainsTable:
    kp_decades_per_kpps: _Number
    ki_decades_per_kpps: _Number


def _empty_is_none(v: Any) -> Any:
    return None if v == {} else v


_OptionalGains = Annotated[_GainsTable | None, BeforeValidator(_empty_is_none)]


@pyd.dataclass(config=_TABLE)
class _ControllerTable:
    dead_zone_fraction: _Number = 0.10
    cap_min_percent: _Number = 1.0
    cap_max_percent: _Number = 100.0
    pi: _OptionalGains = None
    deadbeat: _OptionalGains = None


@pyd.dataclass(config=_TABLE)
class _Document:
    schema: Literal["xtc-model/1"]
    name: Annotated[_Text, Field(min_length=1)]
    model: _ModelTable
    description: _Text = ""
    fitted_on: dict[str, Any] = field(default_factory=dict)
    controller: _ControllerTable = field(default_factory=_ControllerTable)
    extra: dict[str, Any] = field(default_factory=dict)


_DOCUMENT = TypeAdapter(_Document)

# Keys that look like a unit mistake get a specific hint.
_UNIT_HINTS = {
    "b": "b_kpps_per_decade",
    "ybar": "ybar_kpps",
    "ybar_pps": "ybar_kpps (kp/s, not packets/s)",
    "ubar": "ubar_log10_cap",
    "ubar_percent": "ubar_log10_cap (log10 of the cap, not the cap itself)",
    "kp": "kp_decades_per_kpps",
    "ki": "ki_decades_per_kpps",
    "min": "cap_min_percent",
    "max": "cap_max_percent",
    "min_percent": "cap_min_percent",
    "max_percent": "cap_max_percent",
    "period_ms": "period_s",
}


def _gains(t: _GainsTable | None) -> Gains | None:
    return None if t is None else Gains(t.kp_decades_per_kpps, t.ki_decades_per_kpps)


def _failing(source: str | None) -> Callable[[str, str], ModelError]:
    def fail(key: str, problem: str) -> ModelError:
        return ModelError(key, "missing or not a non-empty string" if key == "name" else problem, source)

    return fail


def _from_doc(d: _Document, source: str | None) -> ModelFile:
    try:
        m = d.model
        return ModelFile(
            name=d.name,
            model=LogCapModel(m.a, m.b_kpps_per_decade, m.ybar_kpps, m.ubar_log10_cap, m.period_s),
            caps=CapBounds(d.controller.cap_min_percent, d.controller.cap_max_percent),
            pi=_gains(d.controller.pi),
            deadbeat=_gains(d.controller.deadbeat),
            dead_zone_fraction=d.controller.dead_zone_fraction,
            r_squared=m.r_squared,
            cap_threshold_percent=m.cap_threshold_percent,
            fitted_on=d.fitted_on,
            description=d.description,
            extra=d.extra,
        )
    except ModelError as e:
        raise ModelError(e.field, e.problem, source) from None


#: The model file's ``[caps]`` table before the cap bounds took their one name (``[controller]``
#: ``cap_min_percent``/``cap_max_percent``, docs/design/names.md): still read, with a warning, for one version.
_OLD_CAPS = {"min_percent": "cap_min_percent", "max_percent": "cap_max_percent"}


def _moved_caps(doc: dict[str, Any], source: str | None, fail: Callable[[str, str], ModelError]) -> dict[str, Any]:
    """``doc`` with an old ``[caps]`` table's bounds moved to ``[controller]`` (a warning naming the file)."""
    caps = doc.get("caps")
    if caps is None:
        return doc
    if not isinstance(caps, dict):
        raise fail("caps", "must be a table (deprecated: write [controller] cap_min_percent and cap_max_percent)")
    unknown = sorted(k for k in caps if k not in _OLD_CAPS)
    if unknown:
        raise fail(f"caps.{unknown[0]}", f"unknown key (allowed: {', '.join(_OLD_CAPS)}; deprecated: write "
                                         "[controller] cap_min_percent and cap_max_percent)")
    ctl = doc.get("controller", {})
    if not isinstance(ctl, dict):
        return doc  # validation names it
    both = [k for k in caps if _OLD_CAPS[k] in ctl]
    if both:
        raise fail(f"caps.{both[0]}", f"given twice: also as controller.{_OLD_CAPS[both[0]]} (keep that one only)")
    _log.warning("%s: [caps] min_percent/max_percent are deprecated; write [controller] cap_min_percent and "
                 "cap_max_percent (read as those for now)", source or "model file")
    out = {k: v for k, v in doc.items() if k != "caps"}
    out["controller"] = {**ctl, **{_OLD_CAPS[k]: v for k, v in caps.items()}}
    return out


def loads_model(text: str, source: str | None = None) -> ModelFile:
    """Parse and validate a model file's text.  Raises :class:`ModelError`."""
    fail = _failing(source)
    doc = _moved_caps(parse_toml(text, fail), source, fail)
    return _from_doc(validate_document(doc, _DOCUMENT, _Document, fail, _UNIT_HINTS), source)


def load_model(path: str | Path) -> ModelFile:
    """Load and validate a model file.  Raises :class:`ModelError` naming the bad field."""
    p = Path(path)
    text = read_text_file(p, _failing(str(p)))
    return loads_model(text, source=str(p))


def dumps_model(mf: ModelFile) -> str:
    """Serialise a :class:`ModelFile` to TOML text that :func:`loads_model` reads back."""
    doc: dict[str, Any] = {"schema": SCHEMA, "name": mf.name}
    if mf.description:
        doc["description"] = mf.description
    model: dict[str, Any] = asdict(mf.model)
    if mf.r_squared is not None:
        model["r_squared"] = mf.r_squared
    if mf.cap_threshold_percent is not None:
        model["cap_threshold_percent"] = mf.cap_threshold_percent
    doc["model"] = model
    if mf.fitted_on:
        doc["fitted_on"] = dict(mf.fitted_on)
    ctl: dict[str, Any] = {"dead_zone_fraction": mf.dead_zone_fraction, "cap_min_percent": mf.caps.cap_min_percent,
                           "cap_max_percent": mf.caps.cap_max_percent}
    for nm in ("pi", "deadbeat"):
        g = getattr(mf, nm)
        if g is not None:
            ctl[nm] = {"kp_decades_per_kpps": g.kp, "ki_decades_per_kpps": g.ki}
    doc["controller"] = ctl
    if mf.extra:
        doc["extra"] = dict(mf.extra)
    header = f"# XTC model file ({SCHEMA}). Units: throughput in kp/s, u = log10(cap in percent of one CPU).\n"
    text = header + tomli_w.dumps(doc)
    loads_model(text)  # never write what we could not read back
    return text


def save_model(mf: ModelFile, path: str | Path) -> None:
    """Write a model file atomically (write to a temporary file, then rename)."""
    p = Path(path)
    text = dumps_model(mf)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(p)


PAPER_MODEL_PATH = Path(__file__).with_name("paper.toml")
PAPER_MODEL: ModelFile = load_model(PAPER_MODEL_PATH)
