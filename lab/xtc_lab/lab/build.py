"""Build the lab's C programs with the system C compiler.

Two small programs ship as source beside this module: ``forwarder.c`` (the VR's
userspace packet forwarder) and ``udpsend.c`` (a paced UDP source).

The binary is cached under a directory chosen, in order, from the ``cache_dir``
argument, the ``XTC_CACHE`` environment variable, ``/var/cache/xtc`` (when it can
be created and written, e.g. as root) and ``~/.cache/xtc``.  Its file name holds a
hash of the source and the compiler command, so a changed source is rebuilt and
an unchanged one is reused.  The binary must live on a path that LXC domains can
see: an LXC domain without a ``<filesystem>`` shares the host's root file system.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FORWARDER_SOURCE = Path(__file__).with_name("forwarder.c")
UDPSEND_SOURCE = Path(__file__).with_name("udpsend.c")
CFLAGS: tuple[str, ...] = ("-O2", "-Wall", "-Wextra", "-std=gnu11")
COMPILERS: tuple[str, ...] = ("cc", "gcc", "clang")


class BuildError(RuntimeError):
    """A lab program could not be built (no compiler, unwritable cache, compile error)."""


def default_cache_dir(env: dict[str, str] | None = None) -> Path:
    """Return the cache directory to use (see the module docstring for the order)."""
    env = os.environ if env is None else env
    if env.get("XTC_CACHE"):
        return Path(env["XTC_CACHE"])
    system = Path("/var/cache/xtc")
    try:
        system.mkdir(parents=True, exist_ok=True)
        if os.access(system, os.W_OK):
            return system
    except OSError:
        pass
    return Path.home() / ".cache" / "xtc"


def find_compiler(cc: str | None = None, env: dict[str, str] | None = None) -> str:
    """Return the path of the C compiler: ``cc`` if given, else ``$CC``, else cc/gcc/clang."""
    env = os.environ if env is None else env
    candidates = [cc] if cc else ([env["CC"]] if env.get("CC") else list(COMPILERS))
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    raise BuildError(
        f"no C compiler found (looked for {', '.join(candidates)}); the lab builds its packet "
        "forwarder and sender at run time: install one (Debian: apt-get install gcc) or set CC"
    )


def build_forwarder(cache_dir: Path | str | None = None, cc: str | None = None) -> Path:
    """Build (if needed) the VR forwarder; return the executable's path (see :func:`build_program`)."""
    return build_program(FORWARDER_SOURCE, cache_dir, cc)


def build_udpsend(cache_dir: Path | str | None = None, cc: str | None = None) -> Path:
    """Build (if needed) the paced UDP sender; return the executable's path (see :func:`build_program`)."""
    return build_program(UDPSEND_SOURCE, cache_dir, cc)


def build_program(
    source: Path | str,
    cache_dir: Path | str | None = None,
    cc: str | None = None,
) -> Path:
    """Compile a single-file C program if needed and return the path of the executable.

    The executable is ``<cache_dir>/xtc-<source stem>-<hash>``.

    Parameters
    ----------
    cache_dir
        Where to keep the binary (default: :func:`default_cache_dir`).
    cc
        C compiler to use (default: ``$CC``, then cc, gcc, clang on ``PATH``).
    source
        The C source (one file, no libraries beyond libc).

    Raises
    ------
    BuildError
        No compiler, the source is missing, the cache is not writable, or the compiler failed
        (its output is in the message).
    """
    source = Path(source)
    try:
        code = source.read_bytes()
    except OSError as e:
        raise BuildError(f"cannot read C source {source}: {e}") from e
    compiler = find_compiler(cc)
    digest = hashlib.sha256(code + repr((compiler, CFLAGS)).encode()).hexdigest()[:16]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / f"xtc-{source.stem}-{digest}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".xtc-{source.stem}-", dir=cache)
        os.close(fd)
    except OSError as e:
        raise BuildError(f"cannot write to the build cache {cache}: {e}") from e
    try:
        proc = subprocess.run(
            [compiler, *CFLAGS, "-o", tmp_name, str(source)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            raise BuildError(
                f"{compiler} failed to build {source} (exit {proc.returncode}):\n"
                f"{proc.stderr.strip()}"
            )
        os.chmod(tmp_name, 0o755)
        os.replace(tmp_name, target)  # atomic: concurrent builders never see a partial file
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    for old in cache.glob(f"xtc-{source.stem}-*"):
        if old != target:  # builds of earlier sources (running copies keep their inode)
            old.unlink(missing_ok=True)
    return target
