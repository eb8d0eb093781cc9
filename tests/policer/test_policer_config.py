"""The policer's TOML configuration: each key's type and range, unknown keys, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq.auth
from configerrors import refused

from xtc.policer.config import PolicerConfigError, PolicerConfig, loads_config


def test_empty_file_gives_the_defaults() -> None:
    assert loads_config("", env={}) == PolicerConfig()


@pytest.mark.parametrize(
    "text, key, words",
    [
        ("bogus = 1\n", "bogus", "unknown key (allowed: auth, curve, database, engine, log, schema, server)"),
        ("[engine]\nperiod = 1\n", "engine.period", "unknown key (allowed: link_transport, max_reply_bytes, max_vrs_per_router, period_s, request_timeout_s, sample_link, sample_schema, sample_udp, samples, shards, snapshot_interval_s)"),
        ('[engine]\nsample_schema = "xtc-samples/9"\n', "engine.sample_schema", "xtc-samples/2"),
        ('[engine]\nsample_udp = "0.0.0.0:7400"\n', "engine.sample_udp", "wildcard address; give the address the daemons reach"),
        ('[engine]\nsample_udp = "policer.example:7400"\n', "engine.sample_udp", "does not appear to be an IPv4 or IPv6"),
        ('[engine]\nsample_udp = "198.18.0.1"\n', "engine.sample_udp", "is not ADDRESS:PORT"),
        ('[engine]\nsample_udp = "198.18.0.1:65535"\nshards = 2\n', "engine.sample_udp", "shard 1 would bind port 65536"),
        ('[engine]\nsample_udp = 7400\n', "engine.sample_udp", "string"),
        ("server = 1\n", "server", "must be a table"),
        ('schema = "xtc-policer/2"\n', "schema", "must be 'xtc-policer/1', got 'xtc-policer/2'"),
        ('[server]\nhost = ""\n', "server.host", "must be a non-empty string"),
        ("[server]\nport = 70000\n", "server.port", "0..65535, got 70000"),
        ('[server]\nport = "80"\n', "server.port", "must be a number, got str '80'"),
        ("[server]\nworkers = 0\n", "server.workers", "1..64, got 0"),
        ("[engine]\nshards = 0\n", "engine.shards", "1..64, got 0"),
        ("[engine]\nshards = 65\n", "engine.shards", "1..64, got 65"),
        ('[engine]\nshards = "2"\n', "engine.shards", "integer"),
        ("[engine]\nperiod_s = 0.01\n", "engine.period_s", "0.05..3600, got 0.01"),
        ("[engine]\nlink_transport = \"zmq\"\n", "engine.link_transport", "must be one of 'zmtp', 'libzmq', got 'zmq'"),
        ("[engine]\nrequest_timeout_s = nan\n", "engine.request_timeout_s", "finite"),
        ("[auth]\nprotect_reads = 1\n", "auth.protect_reads", "true or false"),
        ('[engine]\nsamples = "yes"\n', "engine.samples", "true or false"),
        ('[auth]\ntokens_file = "/nonexistent/tokens"\n', "auth.tokens_file", "cannot read"),
        ('[database]\nurl = "mysql://x"\n', "database.url", "sqlite://"),
        ('[curve]\nclient_secret_key_file = "/nonexistent/k"\n', "curve.client_secret_key_file", "no such file"),
    ],
)
def test_bad_configs_name_the_key(text: str, key: str, words: str) -> None:
    refused(lambda: loads_config(text, env={}), PolicerConfigError, key, words)


def test_a_client_key_others_may_read_is_refused_at_load_naming_the_key(tmp_path: Path) -> None:
    k = Path(zmq.auth.create_certificates(tmp_path, "p")[1])
    k.chmod(0o640)
    with pytest.raises(PolicerConfigError) as ei:
        loads_config(f'[curve]\nclient_secret_key_file = "{k}"\n', env={})
    assert ei.value.key == "curve.client_secret_key_file" and "chmod 600" in str(ei.value)
    k.chmod(0o600)
    assert loads_config(f'[curve]\nclient_secret_key_file = "{k}"\n', env={}).curve_secret_key_file == str(k)


def test_values_are_carried_over(tmp_path: Path) -> None:
    k = Path(zmq.auth.create_certificates(tmp_path, "p")[1])
    k.chmod(0o600)
    cfg = loads_config(f'[server]\nhost = "0.0.0.0"\nport = 9000\nworkers = 3\nallow_plain_http = true\n'
                       f'header_timeout_s = 2.5\n[database]\nurl = "sqlite://"\n'
                       f'[engine]\nperiod_s = 2\nrequest_timeout_s = 0.5\nsamples = true\nshards = 4\n[curve]\nclient_secret_key_file = "{k}"\n', env={})
    assert (cfg.host, cfg.port, cfg.db_url, cfg.period_s, cfg.request_timeout_s) == ("0.0.0.0", 9000, "sqlite://", 2.0, 0.5)
    assert isinstance(cfg.port, int) and isinstance(cfg.period_s, float) and cfg.samples is True
    assert cfg.workers == 3 and cfg.shards == 4
    assert cfg.sample_schema == "xtc-samples/3"
    assert loads_config('[engine]\nsample_schema = "xtc-samples/2"\n', env={}).sample_schema == "xtc-samples/2"
    assert cfg.allow_plain_http is True and cfg.header_timeout_s == 2.5 and cfg.tls_certificate_file is None
    assert cfg.curve_secret_key_file == str(k)
