"""The ``bpf()`` system call: maps, programs and their ids, with one error type.  The only module
that calls ``bpf()`` (the product's early-drop limiter :mod:`xtc.host.bpflimiter`; the lab's
input-side bucket, ``xtc_lab.lab.bpfbucket``, uses it too).

No libbpf, no compiler: the attributes are packed here with :mod:`struct` (``union bpf_attr`` of
linux/bpf.h, the fields each command reads) and passed through libc's ``syscall``.  Every failure
is a :class:`BpfError` (an :class:`OSError` with the kernel's errno) whose message names the command
and, for a program the verifier refused, the end of its log.

A file descriptor returned here is the caller's to close (:func:`close`).

Public API
----------
BpfError, map_create, map_lookup, map_update, map_delete, map_lookup_batch, prog_load,
prog_get_fd_by_id, map_get_fd_by_id, prog_map_ids, map_info, close
MAP_HASH, PROG_SCHED_CLS, BPF_ANY, BPF_NOEXIST, BPF_EXIST
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass

__all__ = [
    "BPF_ANY",
    "BPF_EXIST",
    "BPF_F_NO_PREALLOC",
    "BPF_NOEXIST",
    "MAP_HASH",
    "PROG_SCHED_CLS",
    "BpfError",
    "MapInfo",
    "close",
    "map_create",
    "map_delete",
    "map_dump_batch",
    "map_get_fd_by_id",
    "map_info",
    "map_lookup",
    "map_lookup_batch",
    "map_update",
    "prog_get_fd_by_id",
    "prog_load",
    "prog_map_ids",
]

#: ``bpf()``'s system call number by machine.
_NR_BPF = {"x86_64": 321, "aarch64": 280, "armv7l": 386, "ppc64le": 361, "s390x": 351, "riscv64": 280}
# linux/bpf.h: enum bpf_cmd
_MAP_CREATE, _MAP_LOOKUP_ELEM, _MAP_UPDATE_ELEM, _MAP_DELETE_ELEM = 0, 1, 2, 3
_PROG_LOAD = 5
_PROG_GET_FD_BY_ID, _MAP_GET_FD_BY_ID, _OBJ_GET_INFO_BY_FD = 13, 14, 15
_MAP_LOOKUP_BATCH = 24
_NAMES = {_MAP_CREATE: "map create", _MAP_LOOKUP_ELEM: "map lookup", _MAP_UPDATE_ELEM: "map update",
          _MAP_DELETE_ELEM: "map delete", _PROG_LOAD: "prog load", _PROG_GET_FD_BY_ID: "prog get fd by id",
          _MAP_GET_FD_BY_ID: "map get fd by id", _OBJ_GET_INFO_BY_FD: "obj get info by fd",
          _MAP_LOOKUP_BATCH: "map lookup batch"}
MAP_HASH = 1  # enum bpf_map_type
PROG_SCHED_CLS = 3  # enum bpf_prog_type
BPF_ANY, BPF_NOEXIST, BPF_EXIST = 0, 1, 2  # map update flags
BPF_F_NO_PREALLOC = 1  # map flag: a hash map's entries are allocated as they are added
_ATTR_BYTES = 128  # what is passed of union bpf_attr (the fields used here lie in its first 72 bytes)
_OBJ_NAME_BYTES = 16  # BPF_OBJ_NAME_LEN


class BpfError(OSError):
    """A ``bpf()`` call failed: ``errno`` is the kernel's; the message names the command."""


_libc: list[ctypes.CDLL] = []


def _call(cmd: int, attr: bytes | ctypes.Array[ctypes.c_char], what: str = "") -> int:
    nr = _NR_BPF.get(platform.machine())
    if nr is None:
        raise BpfError(errno.ENOSYS, f"bpf(): no system call number known for machine {platform.machine()!r}")
    if not _libc:
        _libc.append(ctypes.CDLL(None, use_errno=True))
    buf = attr if isinstance(attr, ctypes.Array) else ctypes.create_string_buffer(bytes(attr), _ATTR_BYTES)
    r = _libc[0].syscall(nr, cmd, buf, _ATTR_BYTES)
    if r < 0:
        e = ctypes.get_errno()
        raise BpfError(e, f"bpf({_NAMES.get(cmd, cmd)}{': ' + what if what else ''}): {os.strerror(e)}")
    return int(r)


def _name(name: str) -> bytes:
    raw = name.encode("ascii")
    if len(raw) >= _OBJ_NAME_BYTES or not all(c.isalnum() or c in "_." for c in name):
        raise ValueError(f"bpf object name {name!r}: at most 15 characters of [A-Za-z0-9_.]")
    return raw.ljust(_OBJ_NAME_BYTES, b"\0")


def map_create(map_type: int, key_bytes: int, value_bytes: int, max_entries: int, name: str = "", flags: int = 0) -> int:
    """A new map (``flags``: e.g. :data:`BPF_F_NO_PREALLOC`); its fd."""
    attr = struct.pack("<IIIIIII", map_type, key_bytes, value_bytes, max_entries, flags, 0, 0) + _name(name)
    return _call(_MAP_CREATE, attr, name)


def _elem(cmd: int, map_fd: int, key: bytes, value: ctypes.Array[ctypes.c_char] | None, flags: int,
          missing_ok: bool = False) -> bool:
    """One element command; False when ``missing_ok`` and the map has no such key (``ENOENT``)."""
    k = ctypes.create_string_buffer(key, len(key))
    v = 0 if value is None else ctypes.addressof(value)
    try:
        _call(cmd, struct.pack("<I4xQQQ", map_fd, ctypes.addressof(k), v, flags))
    except BpfError as e:
        if missing_ok and e.errno == errno.ENOENT:
            return False
        raise
    return True


def map_lookup(map_fd: int, key: bytes, value_bytes: int) -> bytes | None:
    """The value of ``key`` (None: no such key)."""
    v = ctypes.create_string_buffer(value_bytes)
    return v.raw if _elem(_MAP_LOOKUP_ELEM, map_fd, key, v, 0, missing_ok=True) else None


def map_update(map_fd: int, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
    """Set ``key`` to ``value`` (``flags``: :data:`BPF_ANY`, :data:`BPF_NOEXIST`, :data:`BPF_EXIST`)."""
    _elem(_MAP_UPDATE_ELEM, map_fd, key, ctypes.create_string_buffer(value, len(value)), flags)


def map_delete(map_fd: int, key: bytes) -> bool:
    """Delete ``key``; False when there was none."""
    return _elem(_MAP_DELETE_ELEM, map_fd, key, None, 0, missing_ok=True)


def map_lookup_batch(map_fd: int, key_bytes: int, value_bytes: int, max_entries: int) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a hash map, ``max_entries`` at a time in one call each (usually one call
    in all).  Raises :class:`BpfError` with ``EINVAL``/``ENOTSUPP`` on a kernel without batches (< 5.6)."""
    keys, values, n = map_dump_batch(map_fd, key_bytes, value_bytes, max_entries)
    return [(keys[i * key_bytes:(i + 1) * key_bytes], values[i * value_bytes:(i + 1) * value_bytes]) for i in range(n)]


def map_dump_batch(map_fd: int, key_bytes: int, value_bytes: int, max_entries: int) -> tuple[bytes, bytes, int]:
    """:func:`map_lookup_batch` as two buffers, the keys and the values back to back, and their count
    (for a decoder that takes them whole, e.g. numpy)."""
    kparts: list[bytes] = []
    vparts: list[bytes] = []
    total = 0
    keys = ctypes.create_string_buffer(key_bytes * max_entries)
    values = ctypes.create_string_buffer(value_bytes * max_entries)
    batch_in = ctypes.create_string_buffer(8)
    batch_out = ctypes.create_string_buffer(8)
    first = True
    while True:
        attr = ctypes.create_string_buffer(struct.pack(
            "<QQQQIIQQ", 0 if first else ctypes.addressof(batch_in), ctypes.addressof(batch_out),
            ctypes.addressof(keys), ctypes.addressof(values), max_entries, map_fd, 0, 0), _ATTR_BYTES)
        done = False
        try:
            _call(_MAP_LOOKUP_BATCH, attr)
        except BpfError as e:
            if e.errno != errno.ENOENT:  # ENOENT: the end of the map (count says what this call returned)
                raise
            done = True
        (count,) = struct.unpack_from("<I", attr, 32)
        kparts.append(ctypes.string_at(keys, count * key_bytes))
        vparts.append(ctypes.string_at(values, count * value_bytes))
        total += count
        if done:
            return b"".join(kparts), b"".join(vparts), total
        ctypes.memmove(batch_in, batch_out, 8)
        first = False


def prog_load(prog_type: int, insns: bytes, name: str = "", license_: str = "GPL", verifier_log: bool = True) -> int:
    """Load (verify and JIT) a program of 8-byte instructions; its fd.  A refusal's message ends with
    the verifier's log.  ``verifier_log=False`` asks for none: a program whose verification logs more
    than the 64 KiB buffer (a bounded loop's) is refused with ``ENOSPC`` otherwise."""
    if not insns or len(insns) % 8:
        raise ValueError(f"a bpf program is a whole number of 8-byte instructions, got {len(insns)} bytes")
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(license_.encode("ascii"))
    log = ctypes.create_string_buffer(65536)
    log_attr = (1, len(log), ctypes.addressof(log)) if verifier_log else (0, 0, 0)  # level, size, buffer
    attr = struct.pack("<IIQQIIQII", prog_type, len(insns) // 8, ctypes.addressof(code), ctypes.addressof(lic),
                       *log_attr, 0, 0) + _name(name)
    try:
        return _call(_PROG_LOAD, attr, name)
    except BpfError as e:
        text = log.value.decode(errors="replace").strip()
        raise BpfError(e.errno, f"{e.strerror}{': verifier: ' + text[-600:] if text else ''}") from None


def prog_get_fd_by_id(prog_id: int) -> int:
    """An fd of the loaded program ``prog_id`` (``ENOENT``: gone)."""
    return _call(_PROG_GET_FD_BY_ID, struct.pack("<III", prog_id, 0, 0), f"id {prog_id}")


def map_get_fd_by_id(map_id: int) -> int:
    """An fd of the map ``map_id`` (``ENOENT``: gone)."""
    return _call(_MAP_GET_FD_BY_ID, struct.pack("<III", map_id, 0, 0), f"id {map_id}")


def _info(fd: int, info: ctypes.Array[ctypes.c_char]) -> None:
    _call(_OBJ_GET_INFO_BY_FD, struct.pack("<IIQ", fd, len(info), ctypes.addressof(info)))


def prog_map_ids(prog_fd: int, most: int = 8) -> list[int]:
    """The ids of the maps program ``prog_fd`` uses (``struct bpf_prog_info``: nr_map_ids, map_ids)."""
    ids = (ctypes.c_uint32 * most)()
    info = ctypes.create_string_buffer(64)
    struct.pack_into("<IQ", info, 52, most, ctypes.addressof(ids))
    _info(prog_fd, info)
    (n,) = struct.unpack_from("<I", info, 52)
    return [int(ids[i]) for i in range(min(n, most))]


@dataclass(frozen=True)
class MapInfo:
    """``struct bpf_map_info``'s head: what a map found by id is."""

    map_type: int
    map_id: int
    key_bytes: int
    value_bytes: int
    max_entries: int
    name: str


def map_info(map_fd: int) -> MapInfo:
    """What the map ``map_fd`` is."""
    info = ctypes.create_string_buffer(40)
    _info(map_fd, info)
    t, i, k, v, m, _flags = struct.unpack_from("<IIIIII", info, 0)
    return MapInfo(t, i, k, v, m, info.raw[24:40].split(b"\0", 1)[0].decode("ascii", "replace"))


def close(fd: int | None) -> None:
    """Close an fd returned here (None and an fd closed already: nothing)."""
    if fd is not None and fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
