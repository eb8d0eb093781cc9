"""The generated reference (docs/reference/) is what scripts/gen_reference.py makes of the code now."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import field
from pathlib import Path

import pytest
from pydantic.dataclasses import dataclass as pyd_dataclass

ROOT = Path(__file__).resolve().parents[2]


def _gen():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = mod
    spec.loader.exec_module(mod)
    return mod


gen = _gen()


def test_generated_pages_are_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    rc = gen.main(["--check"])
    assert rc == 0, capsys.readouterr().err


def test_a_stale_page_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "reference"
    shutil.copytree(ROOT / "docs" / "reference", out)
    page = out / "config-daemon.md"
    page.write_text(page.read_text().replace("control_period_s", "control_period_ms"))
    assert gen.main(["--check", "--out", str(out)]) == 1
    assert "docs/reference/config-daemon.md" in capsys.readouterr().err
    assert gen.main(["--out", str(out)]) == 0
    assert gen.main(["--check", "--out", str(out)]) == 0


def test_every_key_of_every_service_is_in_its_page() -> None:
    from xtc.daemon import config as daemon_config
    from xtc.policer import config as policer_config

    daemon = (ROOT / "docs" / "reference" / "config-daemon.md").read_text()
    for section in ("daemon", "controller", "manager", "metrics", "log", "libvirt"):
        for key in getattr(daemon_config, f"{section.capitalize()}Section").__dataclass_fields__:
            assert f"| `{key}` |" in daemon, f"{section}.{key}"
    policer = (ROOT / "docs" / "reference" / "config-policer.md").read_text()
    for key in ("port", "workers", "url", "tokens_file", "shards", "client_secret_key_file"):
        assert f"| `{key}` |" in policer, key
    assert policer_config.SCHEMA in policer


def test_descriptions_come_from_the_docstring_example() -> None:
    doc = '''Example::

        schema = "x/1"
        top = 1                 # a top key
        [sec]                   # a comment on the table's line
        a_s = 2.0               # first line
                                # and its continuation
        # b = 3                 # optional b
        c = 4
        # A paragraph about what follows, under a key
        # that has no comment of its own:
        # d = 5                 # optional d

    Prose after the block = not a key.
    '''
    got = gen.example_descriptions(doc)
    assert got == {"schema": "", "top": "a top key", "sec.a_s": "first line and its continuation",
                   "sec.b": "optional b", "sec.c": "", "sec.d": "optional d"}


def test_a_key_without_description_is_refused() -> None:
    from pydantic.dataclasses import dataclass

    @dataclass
    class Doc:
        described: int = 1
        silent: int = 2

    class Mod:
        __name__ = "fake"
        __doc__ = "Example::\n\n    described = 1  # says what it is\n    silent = 2\n"
        __file__ = str(ROOT / "xtc" / "fake.py")

    with pytest.raises(gen.MissingDescription, match="silent"):
        gen.config_page("t", "i", Mod, Doc)


@pyd_dataclass
class _Metrics:
    enabled: bool = True


@pyd_dataclass
class _Doc:
    plain: int = 1
    # Both keys of a pair, described once
    # over two lines.
    pair_a: str = ""
    pair_b: str = ""

    after_blank: int = 2
    metrics: _Metrics = field(default_factory=_Metrics)


def test_descriptions_from_comments_above_fields_and_the_shared_tables() -> None:
    class Mod:
        __name__ = "fake"
        __doc__ = "Example::\n\n    plain = 1  # from the docstring\n    after_blank = 2  # from the docstring too\n"
        __file__ = str(ROOT / "xtc" / "fake.py")

    page = gen.config_page("t", "i", Mod, _Doc)
    assert "| `pair_a` | string | `\"\"` |  |  | Both keys of a pair, described once over two lines. |" in page
    assert "| `pair_b` | string | `\"\"` |  |  | Both keys of a pair, described once over two lines. |" in page
    assert "from the docstring too" in page
    assert gen.COMMON["metrics.enabled"] in page


def test_the_code_map_names_what_each_package_imports_and_refuses_an_unplaced_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = tmp_path / "mapdemo"  # (a package of its own name: the import graph finds packages on sys.path)
    for rel, text in {"__init__.py": '"""The product."""\n',
                      "control/__init__.py": '"""Laws. Pure."""\n',
                      "control/bank.py": '"""The bank: ``arrays`` of :class:`~mapdemo.control.laws.Law`."""\nfrom . import laws\n',
                      "control/laws.py": '"""Laws."""\n',
                      "daemon/__init__.py": "",
                      "daemon/core.py": '"""The core."""\nfrom ..control import bank\n\ndef f():\n    import mapdemo.models\n',
                      "models/__init__.py": '"""Models."""\n'}.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(gen, "_SOURCES", {"mapdemo": top})
    monkeypatch.setattr(gen, "CODE_MAP_PRODUCT", ("mapdemo", "mapdemo.daemon", "mapdemo.control", "mapdemo.models"))
    monkeypatch.setattr(gen, "CODE_MAP_LAB", ())
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    page = gen.code_map_page()
    daemon = page.split("## `mapdemo.daemon`")[1].split("##")[0]
    assert "(no docstring)" in daemon and "Imports: `mapdemo.control`, `mapdemo.models`." in daemon  # relative, in a function
    assert "| `bank.py` | The bank: `arrays` of `Law`. |" in page
    assert "Imports: no other package." in page.split("## `mapdemo.control`")[1].split("##")[0]
    (top / "brand_new").mkdir()
    (top / "brand_new" / "__init__.py").write_text('"""New."""\n')
    with pytest.raises(gen.UnplacedPackage, match="mapdemo.brand_new"):
        gen.code_map_page()
