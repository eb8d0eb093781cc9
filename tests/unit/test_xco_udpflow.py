"""The lab's paced UDP sender: its pace, and a held sender stopping at its end time."""

from __future__ import annotations

from xtc_lab.xco.experiments import udpflow


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class _Socket:
    """A socket whose ``sendto`` takes ``block_s`` of the clock from ``block_from`` on (held)."""

    def __init__(self, clock: _Clock, block_from: float, block_s: float) -> None:
        self.clock, self.block_from, self.block_s = clock, block_from, block_s
        self.times: list[float] = []

    def sendto(self, payload: bytes, dest: tuple[str, int]) -> int:
        self.times.append(self.clock.t)
        if self.clock.t >= self.block_from:
            self.clock.t += self.block_s
        return len(payload)


def test_paced_sends_on_time_and_a_held_sender_stops_at_the_end(monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(udpflow.time, "sleep", lambda s: setattr(clock, "t", clock.t + s))
    # not held: every 0.1 s from 0 to 1 (exclusive), 10 datagrams
    sock = _Socket(clock, block_from=1e9, block_s=0.0)
    assert udpflow._paced(sock, ("198.18.0.1", 9), b"x", 0.1, 0.0, 1.0, clock) == (10, 0)
    assert [round(t, 6) for t in sock.times] == [round(0.1 * k, 6) for k in range(10)]
    # held from 0.3 s: each send then takes 0.25 s, so after the sends at 0, 0.1, 0.2 and 0.3 the
    # ones due meanwhile go at once (0.55, 0.8) and the one that would go at 1.05 is not sent
    clock.t = 0.0
    sock = _Socket(clock, block_from=0.3, block_s=0.25)
    sent, errors = udpflow._paced(sock, ("198.18.0.1", 9), b"x", 0.1, 0.0, 1.0, clock)
    assert (sent, errors) == (6, 0)
    assert [round(t, 6) for t in sock.times] == [0.0, 0.1, 0.2, 0.3, 0.55, 0.8]
