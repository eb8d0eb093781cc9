"""Compiled kernels (numba) of :class:`xtc.xco.scheduler.fast.FastScheduler`: Algorithm 1 over arrays.

Importing this module raises :class:`ImportError` when numba is missing (the scheduler then runs
its pure-Python code).  The kernels are compiled on first use and cached on disk (``cache=True``:
next to this file, or, when that directory is not writable, in numba's per-user cache directory or
``$NUMBA_CACHE_DIR``); :func:`warm_up` compiles (or loads) them all and returns the time it took.

Why one file: the kernels are one compiled unit over one state layout (the column constants
below), call one another, and are compiled and cached together; split, each module would repeat
the layout.

State, all integer arrays (``n`` hosts, ``L`` directed links, flow slots ``F``):

- ``T[4, n_switches]``: switch parent, depth, up link, down link (the tree; paths are computed).
- ``H[n, NH]`` per host (a host's fields side by side): switch, NIC rate, first flow, number of flows, destination (-1 = hold),
  rotation key, dirty flag, the dirty list, seen / granted stamps, first dormant flow.
- ``F[F, NF]`` per flow slot (a flow's fields side by side): host, destination, next and previous flow of the host, path length,
  destination rotation key, and the stack of free slots; ``FP[F, PL]``: the flow's path.  A flow
  given up after it was granted once stays in its host's *dormant* list (singly linked by the
  next field) with its destination rotation key, and is revived when reported again: the backlog
  groups and the destination keys live only here.
- ``LK[NL, L]`` per link: residual capacity ``C_l - sum of C_x of the senders on l``, capacity,
  residual before the event, a stamp.
- The waiting lists, refreshed after every event that releases every slice in force (and when
  many hosts changed): ``CS[L + 1]`` (offsets) and ``CE[2, E]`` (host, rotation key): per link,
  the senders waiting at that time whose backlog crosses it, least recently granted first.  A
  host whose key, destination or backlog changed since then is *dirty*: its entries are skipped
  and it is looked at from the dirty list instead; a refresh (:func:`refresh`) merges the dirty
  waiting hosts' new entries into the lists.
- ``ctr``: sequence number of the next grant, free-slot count, dirty count, slowest and fastest
  NIC, event stamp, the dirty count beyond which :func:`run_batch` asks for a refresh, then
  :func:`run_batch`'s status (``ctr[C_ST:C_ST + 7]``) and :func:`run_one`'s event
  (``ctr[C_EV:C_EV + 6]``).
- ``W`` (work, ``5 * n + 4``): ``out`` (``W[:3 * n + 4]``), ``fl`` (the next ``n``) and the order of
  the hosts for a refresh (the last ``n``).
- ``io`` (input): number of triggering senders, of added flows, of removed flows, then the
  triggering senders, the added flows ``(host, dest)``, the removed flows ``(host, dest)``.
- ``out`` (output): number of grants, of holds, the grants ``(host, dest)`` in grant order, the
  senders sent a hold in triggering order.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

# rows of H
H_SW, H_NIC, H_HEAD, H_NFL, H_DEST, H_KEY, H_DIRTY, H_DLIST, H_SEEN, H_GRANT, H_DORM = range(11)
NH = 11
# rows of F
F_HOST, F_DEST, F_NEXT, F_PREV, F_LEN, F_DKEY, F_FREE = range(7)
NF = 7
# rows of LK
L_RES, L_CAP, L_BEFORE, L_STAMP = range(4)
NL = 4
# ctr: counters, then run_batch's threshold, status and scratch event
C_SEQ, C_FREE, C_DIRTY, C_MIN_NIC, C_MAX_NIC, C_STAMP, C_MAX_DIRTY = range(7)
C_ST = 7  # run_batch's status: ctr[C_ST:C_ST + 7]
C_EV = 14  # run_one's event, as run_batch takes it: ctr[C_EV:C_EV + 6]
NC = 20


@njit(cache=True)
def _path(s, d, H, T, buf, tmp):
    """Write the path from host s to host d into buf; return its length."""
    par = T[0]
    dep = T[1]
    up = T[2]
    dn = T[3]
    buf[0] = 2 * s
    k = 1
    m = 0
    a = H[s, H_SW]
    b = H[d, H_SW]
    while dep[a] > dep[b]:
        buf[k] = up[a]
        k += 1
        a = par[a]
    while dep[b] > dep[a]:
        tmp[m] = dn[b]
        m += 1
        b = par[b]
    while a != b:
        buf[k] = up[a]
        k += 1
        a = par[a]
        tmp[m] = dn[b]
        m += 1
        b = par[b]
    for i in range(m - 1, -1, -1):
        buf[k] = tmp[i]
        k += 1
    buf[k] = 2 * d + 1
    return k + 1


@njit(cache=True)
def _dirty_backlogged(H, ctr):
    """The dirty hosts with a backlogged flow, least recently granted first (by rotation key)."""
    nd = ctr[C_DIRTY]
    dc = np.empty(nd, np.int64)
    ndc = 0
    for i in range(nd):
        x = H[i, H_DLIST]
        if H[x, H_NFL] > 0:
            dc[ndc] = x
            ndc += 1
    keys = np.empty(ndc, np.int64)
    for i in range(ndc):
        keys[i] = H[dc[i], H_KEY]
    return dc[:ndc][np.argsort(keys, kind="mergesort")]


@njit(cache=True)
def _mark_dirty(H, ctr, x):
    if H[x, H_DIRTY] == 0:
        H[x, H_DIRTY] = 1
        H[ctr[C_DIRTY], H_DLIST] = x
        ctr[C_DIRTY] += 1


@njit(cache=True)
def _find_flow(H, F, x, d):
    f = H[x, H_HEAD]
    while f >= 0:
        if F[f, F_DEST] == d:
            return f
        f = F[f, F_NEXT]
    return -1


@njit(cache=True)
def _add_flow(H, T, F, FP, ctr, x, d, tmp):
    """Add the flow ``(x, d)`` (absent): revived from x's dormant flows with its destination key,
    else in a free slot (the caller made sure there is one) with the key of a destination never
    granted, ``d - n``."""
    f = H[x, H_DORM]
    prev = -1
    while f >= 0 and F[f, F_DEST] != d:
        prev = f
        f = F[f, F_NEXT]
    if f >= 0:
        if prev >= 0:
            F[prev, F_NEXT] = F[f, F_NEXT]
        else:
            H[x, H_DORM] = F[f, F_NEXT]
    else:
        top = ctr[C_FREE] - 1
        f = F[top, F_FREE]
        ctr[C_FREE] = top
        F[f, F_HOST] = x
        F[f, F_DEST] = d
        F[f, F_DKEY] = d - H.shape[0]
        F[f, F_LEN] = _path(x, d, H, T, FP[f], tmp)
    h = H[x, H_HEAD]
    F[f, F_NEXT] = h
    F[f, F_PREV] = -1
    if h >= 0:
        F[h, F_PREV] = f
    H[x, H_HEAD] = f
    H[x, H_NFL] += 1
    _mark_dirty(H, ctr, x)


@njit(cache=True)
def _remove_flow(H, F, ctr, x, d):
    f = _find_flow(H, F, x, d)
    if f < 0:
        return
    p = F[f, F_PREV]
    nx = F[f, F_NEXT]
    if p >= 0:
        F[p, F_NEXT] = nx
    else:
        H[x, H_HEAD] = nx
    if nx >= 0:
        F[nx, F_PREV] = p
    H[x, H_NFL] -= 1
    if F[f, F_DKEY] >= 0:  # granted once: dormant, its destination key kept
        F[f, F_NEXT] = H[x, H_DORM]
        H[x, H_DORM] = f
    else:
        F[ctr[C_FREE], F_FREE] = f
        ctr[C_FREE] += 1
    _mark_dirty(H, ctr, x)


@njit(cache=True)
def add_backlogs(H, T, F, FP, ctr, xs, lens, ds, trig):
    """Record many backlog reports at once: for each host ``xs[i]`` (distinct), its ``lens[i]``
    destinations (next in ``ds``), each added unless the host already has that flow (earlier in
    ``ds`` too); the caller made sure there are ``len(ds)`` free flow slots.  The hosts with a new
    flow and no destination go to ``trig`` (in order).  Returns ``(n_added, n_trig)``; the caller
    then runs the event (:func:`run_event`, no flows in ``io``)."""
    tmp = np.empty(FP.shape[1], np.int64)
    na = 0
    nt = 0
    j = 0
    for i in range(xs.shape[0]):
        x = xs[i]
        new = False
        for _ in range(lens[i]):
            d = ds[j]
            if _find_flow(H, F, x, d) < 0:
                _add_flow(H, T, F, FP, ctr, x, d, tmp)
                na += 1
                new = True
            j += 1
        if new and H[x, H_DEST] < 0:
            trig[nt] = x
            nt += 1
    return na, nt


@njit(cache=True)
def _try_fit(x, H, F, FP, LK, ctr, fl, out, stamp):
    """First fit of x: its destinations least recently granted first; grant the first whose path has
    room for its NIC (that room taken, the grant written to out).  Returns the granted flow's slot
    + 1, or 0 if nothing was granted."""
    c = H[x, H_NIC]
    res = LK[L_RES]
    nf = 0
    f = H[x, H_HEAD]
    while f >= 0:  # insertion sort by destination key (keys of one host are distinct)
        k = F[f, F_DKEY]
        i = nf
        while i > 0 and F[fl[i - 1], F_DKEY] > k:
            fl[i] = fl[i - 1]
            i -= 1
        fl[i] = f
        nf += 1
        f = F[f, F_NEXT]
    for j in range(nf):
        f = fl[j]
        p = FP[f]
        ln = F[f, F_LEN]
        ok = True
        for i in range(ln):
            if res[p[i]] < c:
                ok = False
                break
        if ok:
            for i in range(ln):
                res[p[i]] -= c
            d = F[f, F_DEST]
            s = ctr[C_SEQ]
            ctr[C_SEQ] = s + 1
            H[x, H_DEST] = d
            H[x, H_KEY] = s
            F[f, F_DKEY] = s
            H[x, H_GRANT] = stamp
            _mark_dirty(H, ctr, x)
            g = out[0]
            out[2 + 2 * g] = x
            out[3 + 2 * g] = d
            out[0] = g + 1
            return f + 1
    return 0


@njit(cache=True)
def _sort_by_key(hosts, n, H):
    for a in range(1, n):
        x = hosts[a]
        k = H[x, H_KEY]
        i = a
        while i > 0 and H[hosts[i - 1], H_KEY] > k:
            hosts[i] = hosts[i - 1]
            i -= 1
        hosts[i] = x


@njit(cache=True)
def run_event(H, T, F, FP, LK, CS, CE, ORD, ctr, io, out, fl, full):
    """One scheduling event (see the module docstring for the arrays).

    ``full`` = 1 when every sender in force triggers (slot boundary, first schedule): every
    backlogged host is visited, least recently granted first (``ORD``: the backlogged hosts in
    key order at the last refresh, merged with the dirty list), and the waiting lists must be
    refreshed afterwards (:func:`refresh`).  Otherwise only the triggering senders and the waiting
    senders on released links that were too full for the fastest NIC are visited (merged in key
    order from the waiting lists and the dirty list).  Returns ``(order, n_waiting)``: with
    ``full``, every backlogged host in key order after the event, of which the first
    ``n_waiting`` wait (empty otherwise).
    """
    res = LK[L_RES]
    stamp = ctr[C_STAMP] + 1
    ctr[C_STAMP] = stamp
    ntrig = io[0]
    nadd = io[1]
    nrem = io[2]
    pos = 3
    trig = io[pos:pos + ntrig]
    pos += ntrig
    PL = FP.shape[1]
    buf = np.empty(PL, np.int64)
    tmp = np.empty(PL, np.int64)
    for i in range(nadd):
        _add_flow(H, T, F, FP, ctr, io[pos], io[pos + 1], tmp)
        pos += 2
    # lines 18-21: the triggering senders' paths are released (residual before the event kept)
    released = np.empty(ntrig * PL, np.int64)
    nrel = 0
    told = np.empty(ntrig, np.int64)
    for i in range(ntrig):
        t = trig[i]
        d0 = H[t, H_DEST]
        told[i] = d0
        if d0 >= 0:
            c = H[t, H_NIC]
            ln = _path(t, d0, H, T, buf, tmp)
            for j in range(ln):
                lk = buf[j]
                if LK[L_STAMP, lk] != stamp:
                    LK[L_STAMP, lk] = stamp
                    LK[L_BEFORE, lk] = res[lk]
                    released[nrel] = lk
                    nrel += 1
                res[lk] += c
    for i in range(nrem):
        _remove_flow(H, F, ctr, io[pos], io[pos + 1])
        pos += 2
    out[0] = 0
    out[1] = 0
    min_nic = ctr[C_MIN_NIC]
    max_nic = ctr[C_MAX_NIC]
    if full:
        # every backlogged host, least recently granted first: the clean ones in the order of the
        # last refresh (their keys did not change), merged with the dirty ones (sorted here)
        dc = _dirty_backlogged(H, ctr)
        ndc = dc.shape[0]
        order = np.empty(ORD.shape[0] + ndc, np.int64)
        # Residuals only fall during this first fit, so a link left without room for the slowest
        # NIC stays so: the clean single-flow hosts on its waiting list (valid for clean hosts) are
        # marked and then refused without reading their flow and path.
        blocked = np.zeros(H.shape[0], np.uint8)
        k = 0
        i = 0
        di = 0
        no = ORD.shape[0]
        while True:
            while i < no and H[ORD[i], H_DIRTY] != 0:
                i += 1
            clean = False
            if i < no:
                if di < ndc and H[dc[di], H_KEY] < H[ORD[i], H_KEY]:
                    x = dc[di]
                    di += 1
                else:
                    x = ORD[i]
                    i += 1
                    clean = True
            elif di < ndc:
                x = dc[di]
                di += 1
            else:
                break
            H[x, H_SEEN] = stamp
            if clean and blocked[x] != 0 and H[x, H_NFL] == 1:
                order[k] = x
                k += 1
                continue
            f = _try_fit(x, H, F, FP, LK, ctr, fl, out, stamp) - 1
            if f < 0:
                order[k] = x
                k += 1
                continue
            p = FP[f]
            for j in range(F[f, F_LEN]):
                lk = p[j]
                if res[lk] < min_nic and LK[L_STAMP, lk] != -stamp:
                    LK[L_STAMP, lk] = -stamp
                    for q in range(CS[lk], CS[lk + 1]):
                        blocked[CE[0, q]] = 1
        g = out[0]
        order = order[:k + g]
        for j in range(g):
            order[k + j] = out[2 + 2 * j]
        nwait = k
    else:
        order = np.empty(0, np.int64)
        nwait = 0
        # the released links that were too full for the fastest NIC and still have room
        lists = np.empty(nrel, np.int64)
        nl = 0
        for i in range(nrel):
            lk = released[i]
            if LK[L_BEFORE, lk] < max_nic and res[lk] >= min_nic:
                lists[nl] = lk
                nl += 1
                LK[L_STAMP, lk] = -stamp  # marks "on a list" for the dirty hosts' check
        ptr = np.empty(nl, np.int64)
        end = np.empty(nl, np.int64)
        for j in range(nl):
            ptr[j] = CS[lists[j]]
            end[j] = CS[lists[j] + 1]
        # the dirty hosts waiting with a flow across a listed link
        nd = ctr[C_DIRTY]
        dc = np.empty(nd, np.int64)
        ndc = 0
        if nl > 0:
            for i in range(nd):
                x = H[i, H_DLIST]
                if H[x, H_DEST] >= 0 or H[x, H_NFL] == 0:
                    continue
                hit = False
                f = H[x, H_HEAD]
                while f >= 0 and not hit:
                    p = FP[f]
                    for j in range(F[f, F_LEN]):
                        if LK[L_STAMP, p[j]] == -stamp:
                            hit = True
                            break
                    f = F[f, F_NEXT]
                if hit:
                    dc[ndc] = x
                    ndc += 1
            _sort_by_key(dc, ndc, H)
        ts = trig.copy()
        _sort_by_key(ts, ntrig, H)
        ti = 0
        di = 0
        while True:
            best = np.int64(1) << 62
            src = -3
            x = -1
            if ti < ntrig:
                best = H[ts[ti], H_KEY]
                src = -2
                x = ts[ti]
            if di < ndc and H[dc[di], H_KEY] < best:
                best = H[dc[di], H_KEY]
                src = -1
                x = dc[di]
            for j in range(nl):
                if res[lists[j]] < min_nic:
                    continue
                q = ptr[j]
                e = end[j]
                while q < e:
                    h = CE[0, q]
                    if H[h, H_DIRTY] == 0 and H[h, H_SEEN] != stamp:
                        break
                    q += 1
                ptr[j] = q
                if q < e and CE[1, q] < best:
                    best = CE[1, q]
                    src = j
                    x = CE[0, q]
            if src == -3:
                break
            if src == -2:
                ti += 1
            elif src == -1:
                di += 1
            else:
                ptr[src] += 1
            if H[x, H_SEEN] == stamp:
                continue
            H[x, H_SEEN] = stamp
            if H[x, H_NFL] > 0:
                _try_fit(x, H, F, FP, LK, ctr, fl, out, stamp)
    # holds: triggering senders in force before the event and given nothing
    g = out[0]
    nh = 0
    for i in range(ntrig):
        t = trig[i]
        if told[i] >= 0 and H[t, H_GRANT] != stamp:
            H[t, H_DEST] = -1
            _mark_dirty(H, ctr, t)
            out[2 + 2 * g + nh] = t
            nh += 1
    out[1] = nh
    return order, nwait


@njit(cache=True)
def run_batch(H, T, F, FP, LK, CS, CE, ORD, ctr, ev, W, rec):
    """Several give-ups and backlog reports at one instant, each handled as its own event exactly as
    one :func:`run_event` call per event with the bookkeeping of ``KernelScheduler._run`` between
    them (the waiting lists refreshed after an event that releases every slice in force or when
    more than ``max_dirty`` hosts changed).  The caller made sure there is a free flow slot per
    destination reported.

    ``ev``: number of events, senders in force at the start, then per event its kind (0 give-up,
    1 backlog), host ``x``, count ``m``, then for a give-up its destination, for a backlog ``m``
    destinations.  ``st = ctr[C_ST:C_ST + 7]`` (in and out): position of the next event in ``ev``
    (0: a new batch, started from ``ev``'s header; 0 again when the batch is done), events left,
    senders in force, records written; then, when 1 is returned, ``full``, ``n_waiting`` and the
    length of ``order`` for :func:`refresh`.  (The caller writes nothing into ``st``: one fewer
    numpy assignment per batch.)  ``rec`` (output, at least ``2 * (hosts + 2 * events)`` long: a
    batch grants at most every host not in force at its start plus one per event, and holds at
    most one per event): per grant ``(host, dest)`` and per hold ``(host, -1)``, event after event,
    grants before holds.  ``W``: the work array (``out``, ``fl``, then ``order`` for :func:`refresh`).

    Returns 0 when every event is done, 1 when the waiting lists must be refreshed before the next
    one: the caller calls :func:`refresh` (``order = W[4 * n + 4:][:st[6]]``, ``nw = st[5]``,
    ``full = st[4]``) and then this again.  (Returning only an int: the new arrays come back from
    :func:`refresh`, not from every call; few arguments: each costs the call about 60 ns.)
    """
    n = H.shape[0]
    out = W[:3 * n + 4]
    fl = W[3 * n + 4:4 * n + 4]
    obuf = W[4 * n + 4:]
    st = ctr[C_ST:C_ST + 7]
    max_dirty = ctr[C_MAX_DIRTY]
    p = st[0]
    if p == 0:  # a new batch
        p = 2
        st[1] = ev[0]
        n_active = ev[1]
        nrec = 0
    else:  # resumed after a refresh
        n_active = st[2]
        nrec = st[3]
    io = np.empty(3 + 1 + 2 * ev.shape[0], np.int64)
    while st[1] > 0:
        st[1] -= 1
        kind = ev[p]
        x = ev[p + 1]
        m = ev[p + 2]
        p += 3
        ntrig = 0
        nadd = 0
        nrem = 0
        if kind == 0:
            d = ev[p]
            p += 1
            if _find_flow(H, F, x, d) < 0:
                continue
            if H[x, H_DEST] == d:
                ntrig = 1
            io[3] = x
            q = 3 + ntrig
            io[q] = x
            io[q + 1] = d
            nrem = 1
            full = 1 if ntrig == n_active else 0
        else:
            q = 4
            nd = 0
            for i in range(m):
                d = ev[p + i]
                dup = _find_flow(H, F, x, d) >= 0
                for k in range(nd):
                    if io[q + 2 * k + 1] == d:
                        dup = True
                if dup:
                    continue
                io[q + 2 * nd] = x
                io[q + 2 * nd + 1] = d
                nd += 1
            p += m
            if nd == 0:
                continue
            ntrig = 0 if H[x, H_DEST] >= 0 else 1
            io[3] = x
            if ntrig == 0:
                for k in range(2 * nd):
                    io[3 + k] = io[4 + k]
            nadd = nd
            full = 1 if n_active == 0 else 0
        io[0] = ntrig
        io[1] = nadd
        io[2] = nrem
        order, nw = run_event(H, T, F, FP, LK, CS, CE, ORD, ctr, io, out, fl, full)
        ng = out[0]
        nh = out[1]
        if 2 * (nrec + ng + nh) > rec.shape[0]:
            raise ValueError("run_batch: rec too short")
        for j in range(ng):
            rec[2 * nrec] = out[2 + 2 * j]
            rec[2 * nrec + 1] = out[3 + 2 * j]
            nrec += 1
        for j in range(nh):
            rec[2 * nrec] = out[2 + 2 * ng + j]
            rec[2 * nrec + 1] = -1
            nrec += 1
        n_active += ng - (1 if kind == 0 and ntrig == 1 else 0)  # a give-up's sender was released
        if full or ctr[C_DIRTY] > max_dirty:
            st[0] = p
            st[2] = n_active
            st[3] = nrec
            st[4] = full
            st[5] = nw
            st[6] = order.shape[0]
            obuf[:order.shape[0]] = order
            return 1
    st[0] = 0
    st[2] = n_active
    st[3] = nrec
    return 0


@njit(cache=True)
def run_one(H, T, F, FP, LK, CS, CE, ORD, ctr, W, rec, n_active, kind, x, d):
    """:func:`run_batch` for one give-up (``kind`` 0) or one backlog report of one destination
    (``kind`` 1) of host ``x`` for ``d``, with ``n_active`` senders in force: the event is written
    into ``ctr[C_EV:]`` here, so the caller builds no array.  Called again after a refresh with
    the same arguments (the status in ``ctr`` says where to resume); returns what
    :func:`run_batch` returns."""
    ev = ctr[C_EV:C_EV + 6]
    ev[0] = 1
    ev[1] = n_active
    ev[2] = kind
    ev[3] = x
    ev[4] = 1
    ev[5] = d
    return run_batch(H, T, F, FP, LK, CS, CE, ORD, ctr, ev, W, rec)


@njit(cache=True)
def backlog_of(H, F, x, out):
    """Write host ``x``'s backlogged destinations into ``out``; return how many."""
    k = 0
    f = H[x, H_HEAD]
    while f >= 0:
        out[k] = F[f, F_DEST]
        k += 1
        f = F[f, F_NEXT]
    return k


@njit(cache=True)
def flows_to(H, F, d):
    """The hosts backlogged towards ``d``, in host order."""
    n = H.shape[0]
    out = np.empty(n, np.int64)
    k = 0
    for x in range(n):
        if _find_flow(H, F, x, d) >= 0:
            out[k] = x
            k += 1
    return out[:k]


@njit(cache=True)
def refresh(H, F, FP, LK, ctr, CS, CE, ORD, order, nw, full):
    """Bring the waiting lists and ``ORD`` up to date; every host is clean afterwards.

    A clean host's entries are still right (its key, destination and backlog did not change since
    the last refresh), so each list is the old one without the dirty hosts' entries, merged by key
    with the entries of the dirty hosts now waiting: one pass over the old entries, none over the
    clean hosts' flows.  ``full`` = 1: ``order`` is every backlogged host in key order, the first
    ``nw`` waiting (what :func:`run_event` returns), and becomes ``ORD``; otherwise ``ORD``'s clean
    hosts are merged with the dirty backlogged ones.  Returns ``(CS, CE, ORD)``.
    """
    nd = ctr[C_DIRTY]
    # the dirty hosts now waiting, least recently granted first
    dw = np.empty(nd, np.int64)
    ndw = 0
    if full:
        ORD2 = order
        for i in range(nw):
            x = order[i]
            if H[x, H_DIRTY] != 0:
                dw[ndw] = x
                ndw += 1
    else:
        dc = _dirty_backlogged(H, ctr)
        ndc = dc.shape[0]
        ORD2 = np.empty(ORD.shape[0] + ndc, np.int64)
        k = 0
        i = 0
        di = 0
        no = ORD.shape[0]
        while True:
            while i < no and H[ORD[i], H_DIRTY] != 0:
                i += 1
            if i < no and (di >= ndc or H[ORD[i], H_KEY] < H[dc[di], H_KEY]):
                ORD2[k] = ORD[i]
                i += 1
            elif di < ndc:
                x = dc[di]
                ORD2[k] = x
                di += 1
                if H[x, H_DEST] < 0:
                    dw[ndw] = x
                    ndw += 1
            else:
                break
            k += 1
        ORD2 = ORD2[:k]
    # the new entries, by link (a stable counting sort: each link's in key order).  A path's first
    # link is its host's own uplink, which only that host crosses: when it is released the host
    # triggers the event and is visited anyway, so its list would hold nothing useful and is left
    # empty (a sixth of the entries at Figure 27's sizes).
    L = LK.shape[1]
    st = LK[L_STAMP]
    st[:] = -1
    ncnt = np.zeros(L + 1, np.int64)
    for j in range(ndw):
        x = dw[j]
        f = H[x, H_HEAD]
        while f >= 0:
            p = FP[f]
            for i in range(1, F[f, F_LEN]):
                lk = p[i]
                if st[lk] != x:
                    st[lk] = x
                    ncnt[lk + 1] += 1
            f = F[f, F_NEXT]
    for i in range(L):
        ncnt[i + 1] += ncnt[i]
    NS = ncnt.copy()
    NE = np.empty((2, ncnt[L]), np.int64)
    st[:] = -1
    for j in range(ndw):
        x = dw[j]
        kx = H[x, H_KEY]
        f = H[x, H_HEAD]
        while f >= 0:
            p = FP[f]
            for i in range(1, F[f, F_LEN]):
                lk = p[i]
                if st[lk] != x:
                    st[lk] = x
                    q = ncnt[lk]
                    NE[0, q] = x
                    NE[1, q] = kx
                    ncnt[lk] = q + 1
            f = F[f, F_NEXT]
    st[:] = 0
    # each list: its clean entries merged with its new ones
    CS2 = np.empty(L + 1, np.int64)
    CE2 = np.empty((2, CS[L] + NE.shape[1]), np.int64)  # (unsliced: the lists end at CS2[L])
    o = 0
    for lk in range(L):
        CS2[lk] = o
        i = CS[lk]
        ie = CS[lk + 1]
        j = NS[lk]
        je = NS[lk + 1]
        while True:
            while i < ie and H[CE[0, i], H_DIRTY] != 0:
                i += 1
            if i < ie and (j >= je or CE[1, i] < NE[1, j]):
                CE2[0, o] = CE[0, i]
                CE2[1, o] = CE[1, i]
                i += 1
            elif j < je:
                CE2[0, o] = NE[0, j]
                CE2[1, o] = NE[1, j]
                j += 1
            else:
                break
            o += 1
    CS2[L] = o
    for i in range(nd):
        H[H[i, H_DLIST], H_DIRTY] = 0
    ctr[C_DIRTY] = 0
    return CS2, CE2, ORD2


def warm_up() -> float:
    """Compile (or load from the cache) every kernel on a two-host network; returns seconds taken."""
    t0 = time.perf_counter()
    n = 2
    H = np.zeros((n, NH), np.int64)
    H[:, H_DEST] = -1
    H[:, H_HEAD] = -1
    H[:, H_DORM] = -1
    H[:, H_NIC] = 1
    H[:, H_KEY] = [-2, -1]
    T = np.array([[-1], [0], [-1], [-1]], np.int64)
    F = np.zeros((2, NF), np.int64)
    F[:, F_FREE] = [1, 0]
    FP = np.zeros((2, 2), np.int64)
    LK = np.zeros((NL, 4), np.int64)
    LK[L_RES] = 1
    LK[L_CAP] = 1
    ctr = np.zeros(NC, np.int64)
    ctr[:C_MAX_DIRTY + 1] = [0, 2, 0, 1, 1, 0, 0]
    io = np.array([1, 1, 0, 0, 0, 1], np.int64)
    out = np.zeros(16, np.int64)
    CS = np.zeros(5, np.int64)
    CE = np.zeros((2, 0), np.int64)
    fl = np.zeros(n, np.int64)
    one = np.ones(1, np.int64)
    add_backlogs(H, T, F, FP, ctr.copy(), np.zeros(0, np.int64), one[:0], one[:0], one)
    order, nw = run_event(H, T, F, FP, LK, CS, CE, np.zeros(0, np.int64), ctr, io, out, fl, 1)
    CS, CE, order = refresh(H, F, FP, LK, ctr, CS, CE, order, order, nw, 1)
    io = np.array([1, 0, 0, 0], np.int64)
    run_event(H, T, F, FP, LK, CS, CE, order, ctr, io, out, fl, 0)
    W = np.zeros(5 * n + 4, np.int64)
    ctr[C_ST:C_ST + 3] = 1
    run_batch(H, T, F, FP, LK, CS, CE, order, ctr, np.array([1, 0, 0, 1, 1], np.int64), W, np.empty(16, np.int64))
    ctr[C_ST:C_ST + 7] = 0
    run_one(H, T, F, FP, LK, CS, CE, order, ctr, W, np.empty(16, np.int64), 0, 0, 1, 1)
    refresh(H, F, FP, LK, ctr, CS, CE, order, order[:0], 0, 0)
    backlog_of(H, F, 0, np.empty(n, np.int64))
    flows_to(H, F, 1)
    return time.perf_counter() - t0
