"""The Debian package, built from this repository and installed into a clean Debian 12 root (root).

``bash scripts/build-deb.sh`` builds ``dist/xtc_<version>_<arch>.deb`` (kept when the sources did
not change).  The clean root is a debootstrap ``minbase`` bookworm made from this machine's Debian
mirror; it is cached as a tarball in /var/cache/xtc-tests (remade when older than
``ROOT_MAX_AGE_S``), with the .debs apt downloaded into it (so that a second run downloads nothing).
In the root: ``apt-get install ./xtc.deb`` (its Depends resolved for real), ``xtc --version``, the
check-config of every example in /etc/xtc, the user, the group, the units (installed, not enabled,
nothing running), the state directories; ``apt-get install --reinstall`` (an operator's edit and the
state kept); then ``apt-get remove`` (configuration, state, user kept)
and ``apt-get purge`` plus ``autoremove --purge``: the root's files are then exactly those it had
before the install.  The root is removed again, also on failure.  Each step's time is printed
(run with ``-s`` to see it).
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
CACHE = Path("/var/cache/xtc-tests")
SUITE = "bookworm"
ROOT_MAX_AGE_S = 7 * 24 * 3600
SERVICES = ("daemon", "policer", "xco-controller", "xco-agent")
# the state directories' owners: the daemon and the XCo agent run as root, the others as `xtc`
STATE_OWNER = {"daemon": "root", "xco-agent": "root", "policer": "xtc", "xco-controller": "xtc"}
# In the root: every distribution the package's extras require is installed, and each of their
# modules imports on Debian's python3 (their compiled parts find their libraries).
IMPORTS = """
import importlib, importlib.metadata as m, sys
from pip._vendor.packaging.requirements import Requirement
extras = [e for e in sys.argv[1].split(",") if e]
norm = lambda n: n.lower().replace("_", "-").replace(".", "-")
want = {norm(r.name) for r in map(Requirement, m.requires("xtc") or [])
        if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras)}
missing = []
for w in sorted(want):
    try:
        m.distribution(w)
    except m.PackageNotFoundError:
        missing.append(w)
mods = sorted({mod for mod, ds in m.packages_distributions().items()
               if any(norm(d) in want for d in ds) and not mod.startswith("_") and mod.isidentifier()})
failed = []
for mod in mods:
    try:
        importlib.import_module(mod)
    except Exception as e:
        failed.append(f"{mod}: {type(e).__name__}: {e}")
print(" ".join(mods))
if missing or failed:
    print("missing:", missing, "failed:", failed)
sys.exit(1 if missing or failed else 0)
"""
# check-config command of each example's schema (the key `schema` in the file)
CHECKERS = {"xtc-daemon/": ["xtc", "check-config"], "xtc-policer/": ["xtc", "policer", "check-config"],
            "xco-": ["xtc", "xco", "check-config"]}
# What apt, dpkg and the user database change by themselves when packages come and go: their own
# records and logs, not files the package left; and /run (a tmpfs on a real host: adduser's lock).
BOOKKEEPING = ("var/lib/apt/", "var/lib/dpkg/", "var/cache/apt/", "var/cache/debconf/", "var/cache/ldconfig/",
               "var/log/", "tmp/", "run/", "etc/passwd-", "etc/group-", "etc/shadow-", "etc/gshadow-",
               "etc/subuid", "etc/subgid", "etc/ld.so.cache")
CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root",
              "DEBIAN_FRONTEND": "noninteractive"}


def _needs() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: builds a Debian package and a chroot (debootstrap)")
    for tool in ("debootstrap", "dpkg-buildpackage", "dh_virtualenv", "chroot"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (bash scripts/build-deb.sh as root installs the build tools; "
                        "debootstrap: apt-get install debootstrap)")
    if _mirror() is None:
        pytest.skip(f"no Debian mirror for {SUITE} in this machine's apt sources")


def _mirror() -> str | None:
    """The first Debian mirror of this machine's apt sources that serves ``SUITE`` (not security)."""
    srcs = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for p in srcs:
        if not p.is_file():
            continue
        text = p.read_text()
        if p.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"(?m)^(\w[\w-]*):\s*(.*)$", stanza))
                if SUITE in fields.get("Suites", "").split() and "deb" in fields.get("Types", "").split():
                    for uri in fields.get("URIs", "").split():
                        if "debian" in uri and "security" not in uri:
                            return uri
        else:
            for m in re.finditer(r"(?m)^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", text):
                if m.group(2) == SUITE and "debian" in m.group(1) and "security" not in m.group(1):
                    return m.group(1)
    return None


class Timer:
    """Each step's wall time, printed at the end."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, float]] = []

    def step(self, name: str, t0: float) -> None:
        self.steps.append((name, time.monotonic() - t0))

    def report(self) -> str:
        total = sum(s for _, s in self.steps)
        return "deb test times: " + ", ".join(f"{n} {s:.1f} s" for n, s in self.steps) + f"; total {total:.1f} s"


def _run(cmd: list[str], timeout_s: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, **kw)


def _build_deb() -> Path:
    r = _run(["bash", "scripts/build-deb.sh"], timeout_s=900, cwd=REPO)
    assert r.returncode == 0, f"build-deb.sh failed:\n{r.stderr[-4000:]}"
    deb = Path(r.stdout.strip().splitlines()[-1])
    assert deb.is_file() and re.fullmatch(r"xtc_[^_]+_[a-z0-9]+\.deb", deb.name), r.stdout
    return deb


def _base_tarball(timer: Timer) -> tuple[Path, Path]:
    """The cached minbase root tarball and its directory of downloaded .debs (made when missing or old)."""
    arch = _run(["dpkg", "--print-architecture"]).stdout.strip()
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"debootstrap-{SUITE}-minbase-{arch}.tar"
    archives = CACHE / f"debootstrap-{SUITE}-minbase-{arch}.archives"
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time; the others wait and reuse it
        if tarball.is_file() and time.time() - tarball.stat().st_mtime < ROOT_MAX_AGE_S:
            archives.mkdir(exist_ok=True)
            return tarball, archives
        t0 = time.monotonic()
        shutil.rmtree(archives, ignore_errors=True)
        archives.mkdir()
        work = Path(tempfile.mkdtemp(prefix="xtc-debootstrap-", dir="/var/tmp"))
        try:
            r = _run(["debootstrap", "--variant=minbase", SUITE, str(work), _mirror()], timeout_s=900)
            assert r.returncode == 0, f"debootstrap failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            # the package lists in the tarball: an install then needs no `apt-get update`
            r = _run(["chroot", str(work), "apt-get", "update", "-qq"], env=CHROOT_ENV)
            assert r.returncode == 0, r.stderr
            _run(["chroot", str(work), "apt-get", "clean"], env=CHROOT_ENV)  # debootstrap's own .debs
            tmp = tarball.with_suffix(".tar.tmp")
            r = _run(["tar", "-C", str(work), "--numeric-owner", "-cf", str(tmp), "."])
            assert r.returncode == 0, r.stderr
            tmp.rename(tarball)
        finally:
            _remove_root(work)
        timer.step("debootstrap (cache made)", t0)
    return tarball, archives


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root).rstrip("/") + "/"
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if (line.split()[4] + "/").startswith(prefix)]


def _remove_root(root: Path) -> None:
    """Remove a root this test made; never through a mount point left inside it."""
    if not root.exists():
        return
    for m in sorted(_mounts_under(root), reverse=True):
        subprocess.run(["umount", "-l", m], check=False)
    left = _mounts_under(root)
    assert not left, f"{root}: still mounted: {left}; not removed"
    subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=True)


@pytest.fixture
def timer() -> Iterator[Timer]:
    t = Timer()
    yield t
    print("\n" + t.report())


@pytest.fixture
def clean_root(timer: Timer) -> Iterator[tuple[Path, Path]]:
    """A fresh minbase root from the cached tarball, and the cache of .debs; removed afterwards."""
    _needs()
    tarball, archives = _base_tarball(timer)
    t0 = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="xtc-deb-root-", dir="/var/tmp"))
    try:
        r = _run(["tar", "-C", str(root), "--numeric-owner", "-xf", str(tarball)])
        assert r.returncode == 0, r.stderr
        if Path("/etc/resolv.conf").is_file():  # the tarball's copy may be older than the host's
            (root / "etc/resolv.conf").unlink(missing_ok=True)
            shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")
        cached = root / "var/cache/apt/archives"
        for deb in archives.glob("*.deb"):
            if not (cached / deb.name).exists():
                os.link(deb, cached / deb.name)
        timer.step("root unpacked", t0)
        yield root, archives
    finally:
        _remove_root(root)


def _chroot(root: Path, *cmd: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    return _run(["chroot", str(root), *cmd], timeout_s=timeout_s, env=CHROOT_ENV)


def _apt(root: Path, *args: str) -> subprocess.CompletedProcess:
    """apt-get in ``root``; dpkg without fsync (a root thrown away after the test: 2x faster on a busy disk)."""
    return _chroot(root, "apt-get", "-y", "-q", "-o", "Dpkg::Options::=--force-unsafe-io", *args)


def _files(root: Path) -> set[str]:
    """Every path in ``root`` (relative; directories with a trailing /), but apt's and dpkg's records."""
    out: set[str] = set()
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        rel = "" if rel == "." else rel + "/"
        for n in dirs:
            out.add(rel + n + "/")
        for n in files:
            out.add(rel + n)
    return {p for p in out if not p.startswith(BOOKKEEPING)}


def _user_db(root: Path) -> dict[str, str]:
    return {n: (root / "etc" / n).read_text() for n in ("passwd", "group", "shadow", "gshadow")}


def _processes_in(root: Path) -> list[str]:
    """The processes whose root directory is ``root`` (started from inside it)."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if os.readlink(p / "root") == str(root):
                cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append(f"{p.name}: {cmdline}")
        except OSError:
            continue
    return found


def test_deb_installs_checks_removes_and_purges_in_a_clean_debian_root(clean_root, timer: Timer) -> None:
    root, archives = clean_root
    t0 = time.monotonic()
    deb = _build_deb()
    timer.step("build (or reuse) the .deb", t0)
    version = re.match(r"xtc_([^_]+)_", deb.name).group(1)

    before_files = _files(root)
    before_users = _user_db(root)

    # install with apt, so that the package's Depends are resolved and installed for real
    t0 = time.monotonic()
    shutil.copy(deb, root / "tmp" / deb.name)
    r = _apt(root, "install", "--no-install-recommends", f"/tmp/{deb.name}")
    if r.returncode != 0 and "404" in r.stdout + r.stderr:  # the cached package lists are older than the mirror
        assert _apt(root, "update").returncode == 0
        r = _apt(root, "install", "--no-install-recommends", f"/tmp/{deb.name}")
    assert r.returncode == 0, f"apt-get install failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    (root / "tmp" / deb.name).unlink()
    for d in (root / "var/cache/apt/archives").glob("*.deb"):  # keep what apt downloaded for the next run
        if not (archives / d.name).exists():
            os.link(d, archives / d.name)
    timer.step("apt-get install", t0)

    t0 = time.monotonic()
    # the product, on Debian's python3, and nothing of the testbed
    r = _chroot(root, "xtc", "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"xtc {version}", (r.stdout, r.stderr)
    assert os.readlink(root / "usr/bin/xtc") == "/opt/venvs/xtc/bin/xtc"
    assert os.readlink(root / "opt/venvs/xtc/bin/python3") == "/usr/bin/python3"
    # the byte code names the installed sources (tracebacks show them), not the build tree's
    r = _chroot(root, "/opt/venvs/xtc/bin/python", "-c", "import xtc.cli; print(xtc.cli.main.__code__.co_filename)")
    assert r.stdout.strip() == "/opt/venvs/xtc/lib/python3.11/site-packages/xtc/cli.py", r.stdout + r.stderr
    assert not glob.glob(str(root / "opt/venvs/xtc/lib/python3*/site-packages/xtc_lab*"))
    r = _chroot(root, "/opt/venvs/xtc/bin/python", "-c",
                "import importlib.metadata as m, importlib.util as u, sys;"
                "bad = [e.value for d in m.distributions() for e in d.entry_points if e.value.startswith('xtc_lab')];"
                "bad += ['module xtc_lab'] if u.find_spec('xtc_lab') else [];"
                "print(bad); sys.exit(1 if bad else 0)")
    assert r.returncode == 0, f"the environment names the testbed: {r.stdout} {r.stderr}"

    extras = (root / "usr/share/doc/xtc/extras").read_text().strip()
    r = _chroot(root, "/opt/venvs/xtc/bin/python", "-c", IMPORTS, extras)
    assert r.returncode == 0, f"extras [{extras}]: {r.stdout} {r.stderr}"
    for needed in ("libvirt", "fastapi", "pyroute2"):  # the router's, the policer's, the XCo agent's
        assert needed in r.stdout.split(), f"{needed} is not in the package (extras [{extras}])"

    # every example configuration shipped in /etc/xtc, checked by its own check-config
    shipped = sorted(p for p in (REPO / "packaging").glob("*.toml") if not p.name.endswith("-sim.toml"))
    conf = sorted((root / "etc/xtc").glob("*.toml"))
    assert [p.name for p in conf] == sorted(p.name.removeprefix("xtc-") for p in shipped)
    conffiles = _chroot(root, "dpkg-query", "-W", "-f=${Conffiles}", "xtc").stdout
    failures = []
    for p in conf:
        assert f"/etc/xtc/{p.name} " in conffiles, f"/etc/xtc/{p.name} is not a conffile: {conffiles}"
        schema = tomllib.loads(p.read_text()).get("schema", "")
        cmd = next((c for prefix, c in CHECKERS.items() if schema.startswith(prefix)), None)
        assert cmd is not None, f"/etc/xtc/{p.name}: schema {schema!r} has no check-config in this test"
        r = _chroot(root, *cmd, f"/etc/xtc/{p.name}")
        if r.returncode != 0:
            failures.append(f"{' '.join(cmd)} /etc/xtc/{p.name}: exit {r.returncode}: {(r.stdout + r.stderr).strip()}")
    assert not failures, "\n".join(failures)

    # the user and group, the state directories, the units installed but neither enabled nor running
    pw = _chroot(root, "getent", "passwd", "xtc").stdout.strip().split(":")
    gr = _chroot(root, "getent", "group", "xtc").stdout.strip().split(":")
    assert len(pw) == 7 and len(gr) == 4, (pw, gr)
    assert int(pw[2]) < 1000 and pw[3] == gr[2] and pw[5] == "/nonexistent" and pw[6] == "/usr/sbin/nologin", pw
    for svc in SERVICES:
        st = (root / f"var/lib/xtc-{svc}").stat()
        owner = 0 if STATE_OWNER[svc] == "root" else int(pw[2])
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (owner, int(gr[2]), 0o750), (svc, st)
    units = sorted(p.name for p in (REPO / "packaging").glob("*.service"))
    assert units, "packaging/ holds no unit"
    for u in units:
        assert (root / "lib/systemd/system" / u).read_text() == (REPO / "packaging" / u).read_text(), u
    enabled = [str(p) for p in (root / "etc/systemd/system").rglob("xtc*")]
    assert not enabled, f"units enabled on install: {enabled}"
    if shutil.which("systemctl"):
        r = _run(["systemctl", f"--root={root}", "is-enabled", *units])
        assert r.stdout.split() == ["disabled"] * len(units), r.stdout + r.stderr
    postinst = (root / "var/lib/dpkg/info/xtc.postinst").read_text()
    assert "deb-systemd-invoke start" not in postinst and "deb-systemd-invoke $_dh_action" not in postinst
    prerm = (root / "var/lib/dpkg/info/xtc.prerm").read_text()
    assert f"deb-systemd-invoke stop {' '.join(units)} " in prerm, "remove does not stop every unit"
    assert not _processes_in(root), f"started on install: {_processes_in(root)}"
    timer.step("checks", t0)

    # installed again over itself (an upgrade's maintainer scripts): an operator's edit of a conffile,
    # the state, the user's uid and the directories' owners stay
    t0 = time.monotonic()
    edited = root / "etc/xtc" / conf[0].name
    edited.write_text(edited.read_text() + "# edited by the operator\n")
    (root / "var/lib/xtc-policer/state").write_text("kept\n")
    shutil.copy(deb, root / "tmp" / deb.name)
    r = _apt(root, "install", "--reinstall", f"/tmp/{deb.name}")
    assert r.returncode == 0, f"reinstall failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    (root / "tmp" / deb.name).unlink()
    assert edited.read_text().endswith("# edited by the operator\n")
    assert (root / "var/lib/xtc-policer/state").read_text() == "kept\n"
    assert _chroot(root, "getent", "passwd", "xtc").stdout.strip().split(":") == pw
    assert (root / "var/lib/xtc-policer").stat().st_uid == int(pw[2])
    assert _chroot(root, "xtc", "--version").returncode == 0
    timer.step("reinstall", t0)

    # remove: the environment, the command and the units go; configuration, state, user and group stay
    t0 = time.monotonic()
    r = _apt(root, "remove", "xtc")
    assert r.returncode == 0, r.stdout + r.stderr
    for gone in ("opt/venvs", "usr/bin/xtc", *(f"lib/systemd/system/{u}" for u in units)):
        assert not os.path.lexists(root / gone), f"/{gone} left after remove"
    assert sorted(p.name for p in (root / "etc/xtc").glob("*.toml")) == [p.name for p in conf]
    assert all((root / f"var/lib/xtc-{svc}").is_dir() for svc in SERVICES)
    assert _chroot(root, "getent", "passwd", "xtc").returncode == 0

    # purge, and the dependencies apt brought: the root is as it was before the install
    r = _apt(root, "purge", "xtc")
    assert r.returncode == 0, r.stdout + r.stderr
    r = _apt(root, "autoremove", "--purge")
    assert r.returncode == 0, r.stdout + r.stderr
    timer.step("remove, purge, autoremove", t0)
    after_files = _files(root)
    assert sorted(after_files - before_files) == [], "left after purge"
    assert sorted(before_files - after_files) == [], "removed by the purge although not the package's"
    assert _user_db(root) == before_users, "the user database differs from the one before the install"
