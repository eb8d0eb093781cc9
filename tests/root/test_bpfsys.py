"""The bpf() system call module (xtc.host.bpfsys) on the real kernel: maps, a program the verifier
accepts and one it refuses, ids back to fds, and the errors (one BpfError naming the command)."""

from __future__ import annotations

import errno
import os
import struct

import pytest

from xtc.host import bpfprog, bpfsys

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.timeout(30)]


@pytest.fixture
def fds():
    if os.geteuid() != 0:
        pytest.skip("bpf() needs root here")
    made: list[int] = []
    yield made
    for fd in made:
        bpfsys.close(fd)


def test_maps_hold_look_up_batch_and_delete(fds):
    m = bpfsys.map_create(bpfsys.MAP_HASH, 4, 8, 256, "xtc_test", bpfsys.BPF_F_NO_PREALLOC)
    fds.append(m)
    assert bpfsys.map_lookup(m, struct.pack("<I", 1), 8) is None
    for i in range(1, 101):
        bpfsys.map_update(m, struct.pack("<I", i), struct.pack("<Q", 10 * i))
    with pytest.raises(bpfsys.BpfError, match=r"bpf\(map update\).*exists") as e:
        bpfsys.map_update(m, struct.pack("<I", 1), struct.pack("<Q", 0), bpfsys.BPF_NOEXIST)
    assert e.value.errno == errno.EEXIST
    with pytest.raises(bpfsys.BpfError, match=r"bpf\(map update\)") as e:  # a missing key is an error here
        bpfsys.map_update(m, struct.pack("<I", 999), struct.pack("<Q", 0), bpfsys.BPF_EXIST)
    assert e.value.errno == errno.ENOENT
    assert bpfsys.map_lookup(m, struct.pack("<I", 7), 8) == struct.pack("<Q", 70)
    got = dict(bpfsys.map_lookup_batch(m, 4, 8, 16))  # several calls of 16
    assert {struct.unpack("<I", k)[0]: struct.unpack("<Q", v)[0] for k, v in got.items()} == {
        i: 10 * i for i in range(1, 101)}
    assert bpfsys.map_delete(m, struct.pack("<I", 7)) is True and bpfsys.map_delete(m, struct.pack("<I", 7)) is False
    info = bpfsys.map_info(m)
    assert (info.name, info.key_bytes, info.value_bytes, info.max_entries) == ("xtc_test", 4, 8, 256)
    again = bpfsys.map_get_fd_by_id(info.map_id)
    fds.append(again)
    assert bpfsys.map_lookup(again, struct.pack("<I", 8), 8) == struct.pack("<Q", 80)


def test_the_limiter_program_loads_and_names_its_maps_and_a_bad_one_says_why(fds):
    limits = bpfsys.map_create(bpfsys.MAP_HASH, 4, 24, 16, "xtc_ed_limits")
    drops = bpfsys.map_create(bpfsys.MAP_HASH, 4, 8, 16, "xtc_ed_drops")
    fds += [limits, drops]
    prog = bpfsys.prog_load(bpfsys.PROG_SCHED_CLS, bpfprog.program(limits, drops), "xtc_ed")
    fds.append(prog)
    ids = bpfsys.prog_map_ids(prog)
    assert sorted(ids) == sorted(bpfsys.map_info(fd).map_id for fd in (limits, drops))
    # r0 never set before exit: the verifier refuses, and its log is in the message
    with pytest.raises(bpfsys.BpfError, match=r"(?s)bpf\(prog load: xtc_bad\).*verifier.*R0 !read_ok") as e:
        bpfsys.prog_load(bpfsys.PROG_SCHED_CLS, bpfprog.insn(0x95), "xtc_bad")
    assert e.value.errno in (errno.EACCES, errno.EINVAL)
    with pytest.raises(bpfsys.BpfError, match="prog get fd by id") as e:
        bpfsys.prog_get_fd_by_id(2**31 - 1)
    assert e.value.errno == errno.ENOENT
    with pytest.raises(ValueError, match="at most 15"):
        bpfsys.map_create(bpfsys.MAP_HASH, 4, 8, 16, "a_name_far_too_long")
