"""``tcp_states`` counts the policer's sockets toward its daemons' ports by state, and leaves out the sockets
that were there before the daemons listened (``tcp_sockets``): a port is free again while the connections
to its last listener still wait in TIME-WAIT, and a daemon given that port must not be counted with them."""

from __future__ import annotations

import socket
from pathlib import Path

from xtc.policer.link import tcp_sockets, tcp_states

HEAD = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def _line(n: int, local_port: int, remote_port: int, state: int) -> str:
    return (f"   {n}: 0100007F:{local_port:04X} 0100007F:{remote_port:04X} {state:02X} 00000000:00000000 00:00000000 "
            f"00000000     0        0 0\n")


def test_the_states_by_remote_port_and_the_sockets_left_out(tmp_path: Path) -> None:
    (tmp_path / "tcp").write_text(HEAD + _line(0, 40000, 8080, 6) + _line(1, 40002, 9090, 6))
    before = tcp_sockets(tmp_path)
    (tmp_path / "tcp").write_text(HEAD + _line(0, 40000, 8080, 6) + _line(1, 40002, 9090, 6)
                                  + _line(2, 40004, 8080, 1) + _line(3, 40006, 8080, 6))
    (tmp_path / "tcp6").write_text(HEAD)
    assert tcp_states([8080], tmp_path) == {"time_wait": 2, "established": 1}
    assert tcp_states([8080], tmp_path, ignore=before) == {"time_wait": 1, "established": 1}
    assert tcp_states([8080], tmp_path / "nowhere") == {} and tcp_sockets(tmp_path / "nowhere") == frozenset()


def test_a_new_connection_on_the_addresses_of_one_left_out_is_counted(tmp_path: Path) -> None:
    """Loopback lets a new connection reuse the very addresses of a socket in TIME-WAIT: once established,
    it is the policer's, and counted."""
    (tmp_path / "tcp").write_text(HEAD + _line(0, 40000, 8080, 6))
    before = tcp_sockets(tmp_path)
    (tmp_path / "tcp").write_text(HEAD + _line(0, 40000, 8080, 1))
    assert tcp_states([8080], tmp_path, ignore=before) == {"established": 1}


def test_a_port_given_again_is_not_counted_with_its_last_listeners_connections() -> None:
    """On this host's loopback: a connection to a listener, closed by its client first (so in TIME-WAIT on
    the client's side), then a new listener on the same port and a connection to it: the first connection is
    counted without ``ignore``, not with it."""
    first = socket.create_server(("127.0.0.1", 0))
    port = first.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    peer, _ = first.accept()
    client.close()  # the active close: the client's socket waits in TIME-WAIT toward ``port``
    assert peer.recv(1) == b""
    peer.close()
    first.close()
    before = tcp_sockets()
    again = socket.create_server(("127.0.0.1", port))  # the port, free again, given to a "daemon"
    policer = socket.create_connection(("127.0.0.1", port))  # and the policer's connection to it
    try:
        assert tcp_states([port]).get("time_wait", 0) >= 1
        assert tcp_states([port], ignore=before) == {"established": 1}
    finally:
        policer.close()
        again.close()
