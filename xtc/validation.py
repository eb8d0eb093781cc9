"""What the TOML files of XTC share: pydantic field types and checks, and the translation of a
pydantic ``ValidationError`` into one ``(key path, readable problem)`` pair.

Used by the daemon configuration (:mod:`xtc.daemon.config`), the policer configuration
(:mod:`xtc.policer.config`) and the model files (:mod:`xtc.models`); each raises its own error
class through the ``fail(key, problem)`` callable it passes to :func:`read_text_file` and
:func:`parse_document`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping, get_args, get_origin

from pydantic import Strict, TypeAdapter, ValidationError, WrapValidator
from pydantic_core import ErrorDetails

#: Builds the error a loader raises: ``fail(key path, problem)``.
Fail = Callable[[str, str], Exception]

#: A TOML integer or float, as a float (finite when the table forbids NaN and infinity).
Number = Annotated[float, Strict()]


class DocumentError(ValueError):
    """A document (configuration or model file) is invalid; the base of each loader's error class.

    Parameters
    ----------
    key : str
        Key path of the culprit (``"daemon.control_period_s"``), or ``"<file>"``.
    problem : str
        What is wrong with it, readable.
    source : str or None
        File the text came from, if any (leads the message).
    """

    #: Words before the quoted key in the message (``"field "`` gives ``field 'a': ...``).
    key_label = ""

    def __init__(self, key: str, problem: str, source: str | None = None):
        self.key = key
        self.problem = problem
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{self.key_label}'{key}': {problem}")

    @classmethod
    def failing(cls, source: str | None) -> Fail:
        """The ``fail(key, problem)`` callable that builds this error about ``source``."""
        return lambda key, problem: cls(key, problem, source)


class FieldProblem(ValueError):
    """Raised by a check about a key other than the one being validated.

    ``where`` is relative to the table the check runs on: ``"pub_endpoint"``, ``"vr[1].path"``,
    ``"[2]"`` (an element of the list being validated).
    """

    def __init__(self, where: str, problem: str):
        self.where = where
        self.problem = problem
        super().__init__(problem)


def within(lo: float, hi: float) -> WrapValidator:
    """A range check whose message gives the range and the value as written."""
    shown = f"{lo}..{hi}" if isinstance(lo, int) and isinstance(hi, int) else f"{lo:g}..{hi:g}"

    def check(v: Any, handler: Callable[[Any], Any]) -> Any:
        x = handler(v)
        if not lo <= x <= hi:
            raise ValueError(f"must be within {shown}, got {v}")
        return x

    return WrapValidator(check)


def key_path(loc: tuple[str | int, ...], where: str = "") -> str:
    """A TOML key path: ``("sim", "vr", 0, "name")`` is ``sim.vr[0].name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    if where:
        out += where if where.startswith("[") or not out else f".{where}"
    return out


def _unwrap(t: Any) -> Any:
    while get_origin(t) is Annotated:
        t = get_args(t)[0]
    return t


def _type_at(root: type, loc: tuple[str | int, ...]) -> Any:
    """The declared type of the value at ``loc`` (None if ``loc`` names no declared key)."""
    t: Any = root
    for part in loc:
        t = _unwrap(t)
        if isinstance(part, int):
            t = get_args(t)[0] if get_args(t) else None
        else:
            info = getattr(t, "__pydantic_fields__", {}).get(part)
            t = info.annotation if info is not None else None
        if t is None:
            return None
    return _unwrap(t)


def _type_name(v: Any) -> str:
    return type(v).__name__


def validation_problem(
    exc: ValidationError, root: type, hints: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The first problem of a pydantic error as ``(key path, readable problem)``.

    An unknown key is reported before anything else (it often explains a missing one).
    """
    errors = exc.errors()
    unknown = [e for e in errors if e["type"] in ("unexpected_keyword_argument", "extra_forbidden")]
    e: ErrorDetails = (unknown or errors)[0]
    loc, kind, v = tuple(e["loc"]), e["type"], e.get("input")
    cause = (e.get("ctx") or {}).get("error")
    if isinstance(cause, FieldProblem):
        return key_path(loc, cause.where), cause.problem
    key = key_path(loc)
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        table = _type_at(root, loc[:-1])
        hint = (hints or {}).get(str(loc[-1]))
        if hint:
            return key, hint if hint.startswith("unknown key") else f"unknown key; did you mean '{hint}'?"
        # as a file writes them: a field's alias where it has one (XCo's ``schema`` is the field ``schema_``)
        allowed = sorted(info.alias or name for name, info in getattr(table, "__pydantic_fields__", {}).items())
        return key, f"unknown key (allowed: {', '.join(allowed)})"
    if kind == "value_error":
        return key, str(cause)
    if kind == "missing":
        return key, "missing table" if hasattr(_type_at(root, loc), "__pydantic_fields__") else "missing"
    if kind == "literal_error":
        ann = _type_at(root, loc)
        choices = get_args(ann) if get_origin(ann) is Literal else ()
        if len(choices) > 1 and all(isinstance(c, str) for c in choices) and not isinstance(v, str):
            return key, f"must be a string, got {_type_name(v)} {v!r}"
        if len(choices) == 1:
            return key, f"must be {choices[0]!r}, got {v!r}"
        if choices:
            return key, f"must be one of {', '.join(repr(c) for c in choices)}, got {v!r}"
        return key, f"must be {e['ctx']['expected']}, got {v!r}"
    if kind in ("float_type", "float_parsing"):
        return key, f"must be a number, got {_type_name(v)} {v!r}"
    if kind == "finite_number":
        return key, f"must be finite, got {v}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return key, f"must be an integer, got {_type_name(v)} {v!r}"
    if kind == "bool_type":
        return key, f"must be true or false, got {_type_name(v)} {v!r}"
    if kind == "string_type":
        return key, f"must be a string, got {_type_name(v)} {v!r}"
    if kind in ("dataclass_type", "model_type", "model_attributes_type", "dict_type"):
        return key, "must be a table" if loc and isinstance(loc[-1], int) else f"must be a table, got {_type_name(v)}"
    if kind in ("too_short", "too_long"):
        ctx = e.get("ctx") or {}
        bound = f"at least {ctx.get('min_length')}" if kind == "too_short" else f"at most {ctx.get('max_length')}"
        return key, f"must have {bound} entries, got {ctx.get('actual_length')}"
    if kind in ("tuple_type", "list_type"):
        if hasattr(_type_at(root, loc + (0,)), "__pydantic_fields__"):
            return key, f"must be an array of tables ([[{key}]])"
        return key, f"must be a list, got {_type_name(v)}"
    return key, e["msg"]


def read_text_file(path: str | Path, fail: Fail) -> str:
    """The UTF-8 text of ``path``; raises ``fail("<file>", problem)`` if it cannot be read or decoded."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise fail("<file>", f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise fail("<file>", "not UTF-8 text") from None


def parse_toml(text: str, fail: Fail) -> dict[str, Any]:
    """The TOML document ``text``; raises ``fail("<file>", problem)`` if it is not valid TOML."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise fail("<file>", f"not valid TOML: {e}") from None


def validate_document(
    doc: Any, adapter: TypeAdapter, root: type, fail: Fail, hints: Mapping[str, str] | None = None
) -> Any:
    """Validate a parsed document with ``adapter`` (whose type is ``root``).

    Raises ``fail(key path, problem)`` on the first problem :func:`validation_problem` finds
    (``hints``: unknown key -> suggested key).
    """
    try:
        return adapter.validate_python(doc)
    except ValidationError as e:
        raise fail(*validation_problem(e, root, hints)) from None


def parse_document(
    text: str, adapter: TypeAdapter, root: type, fail: Fail, hints: Mapping[str, str] | None = None
) -> Any:
    """Parse TOML ``text`` and validate it with ``adapter`` (whose type is ``root``).

    Raises ``fail(key path, problem)`` on invalid TOML (key ``"<file>"``) or on the first
    problem :func:`validation_problem` finds (``hints``: unknown key -> suggested key).
    """
    return validate_document(parse_toml(text, fail), adapter, root, fail, hints)
