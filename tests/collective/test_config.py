"""Tests of Config validation and of reading it from environment variables."""

from __future__ import annotations

import socket

import pytest

from collective import config as cfg
from collective.config import Config, config_from_env


@pytest.mark.timeout(10)
def test_empty_environment_gives_defaults() -> None:
    assert config_from_env(environ={}) == Config()


@pytest.mark.timeout(10)
def test_every_variable_is_parsed() -> None:
    environ = {
        cfg.ENV_RANK: "2",
        cfg.ENV_SIZE: "4",
        cfg.ENV_RENDEZVOUS: "10.0.0.1:29500",
        cfg.ENV_SECRET: "00ff10",
        cfg.ENV_ADVERTISE_HOST: "10.0.0.7",
        cfg.ENV_HOST_KEY: "node-a",
        cfg.ENV_TIMEOUT: "12.5",
        cfg.ENV_CONNECT_TIMEOUT: "3",
        cfg.ENV_HANDSHAKE_TIMEOUT: "0.5",
        cfg.ENV_DISABLE_SHM: "true",
        cfg.ENV_SHM_BUFFER_BYTES: "65536",
        cfg.ENV_TCP_CHUNK_BYTES: "4096",
        cfg.ENV_GRADIENT_BUCKET_BYTES: "0",
        cfg.ENV_SPIN_US: "0",
        cfg.ENV_YIELD_US: "500",
    }
    assert config_from_env(environ=environ) == Config(
        rank=2, size=4, rendezvous="10.0.0.1:29500", secret=b"\x00\xff\x10",
        advertise_host="10.0.0.7", host_key="node-a", timeout_s=12.5, connect_timeout_s=3.0,
        handshake_timeout_s=0.5, enable_shm=False, shm_buffer_bytes=65536, tcp_chunk_bytes=4096,
        gradient_bucket_bytes=0, spin_us=0, yield_us=500)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("word, enabled", [("1", False), ("TRUE", False), ("yes", False),
                                           ("0", True), ("false", True), ("off", True)])
def test_disable_shm_words(word: str, enabled: bool) -> None:
    assert config_from_env(environ={cfg.ENV_DISABLE_SHM: word}).enable_shm is enabled


@pytest.mark.timeout(10)
def test_empty_variables_count_as_unset() -> None:
    assert config_from_env(environ={cfg.ENV_RANK: "", cfg.ENV_TIMEOUT: "  "}) == Config()


@pytest.mark.timeout(10)
def test_explicit_base_fields_win_over_environment() -> None:
    environ = {cfg.ENV_RANK: "1", cfg.ENV_SIZE: "4", cfg.ENV_TIMEOUT: "9"}
    base = Config(rank=3, timeout_s=42.0)
    result = config_from_env(base, environ)
    assert (result.rank, result.size, result.timeout_s) == (3, 4, 42.0)


@pytest.mark.timeout(10)
def test_base_fields_left_at_default_take_the_environment() -> None:
    base = Config(size=8)
    result = config_from_env(base, {cfg.ENV_TIMEOUT: "9", cfg.ENV_SIZE: "2"})
    assert (result.size, result.timeout_s) == (8, 9.0)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("environ, needle", [
    ({cfg.ENV_RANK: "two"}, "COLLECTIVE_RANK='two'"),
    ({cfg.ENV_RANK: "-1"}, "COLLECTIVE_RANK=-1"),
    ({cfg.ENV_RANK: "4", cfg.ENV_SIZE: "4"}, "COLLECTIVE_RANK=4 must be < COLLECTIVE_SIZE=4"),
    ({cfg.ENV_SIZE: "0"}, "COLLECTIVE_SIZE=0"),
    ({cfg.ENV_RENDEZVOUS: "nohostport"}, "COLLECTIVE_RENDEZVOUS='nohostport'"),
    ({cfg.ENV_RENDEZVOUS: "host:99999"}, "COLLECTIVE_RENDEZVOUS='host:99999'"),
    ({cfg.ENV_SECRET: "zz"}, "COLLECTIVE_SECRET is not valid hex"),
    ({cfg.ENV_TIMEOUT: "0"}, "COLLECTIVE_TIMEOUT=0.0"),
    ({cfg.ENV_TIMEOUT: "nan"}, "COLLECTIVE_TIMEOUT=nan"),
    ({cfg.ENV_CONNECT_TIMEOUT: "soon"}, "COLLECTIVE_CONNECT_TIMEOUT='soon'"),
    ({cfg.ENV_HANDSHAKE_TIMEOUT: "0"}, "COLLECTIVE_HANDSHAKE_TIMEOUT=0.0"),
    ({cfg.ENV_DISABLE_SHM: "maybe"}, "COLLECTIVE_DISABLE_SHM='maybe'"),
    ({cfg.ENV_SHM_BUFFER_BYTES: "0"}, "COLLECTIVE_SHM_BUFFER_BYTES=0"),
    ({cfg.ENV_SPIN_US: "-2"}, "COLLECTIVE_SPIN_US=-2 must be an int >= 0, or -1"),
    ({cfg.ENV_YIELD_US: "1.5"}, "COLLECTIVE_YIELD_US='1.5' is not an integer"),
])
def test_bad_environment_values_name_the_variable(environ: dict, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        config_from_env(environ=environ)
    assert needle in str(info.value)


@pytest.mark.timeout(10)
def test_cross_field_error_names_each_source() -> None:
    # rank from the base Config, size from the environment.
    with pytest.raises(ValueError, match=r"Config.rank=5 must be < COLLECTIVE_SIZE=2"):
        config_from_env(Config(rank=5), {cfg.ENV_SIZE: "2"})


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kwargs, needle", [
    ({"rank": 2, "size": 2}, "Config.rank=2"),
    ({"rank": True}, "Config.rank=True must be an int"),
    ({"secret": b""}, "Config.secret=<redacted> must be non-empty"),
    ({"timeout_s": -1.0}, "Config.timeout_s=-1.0"),
    ({"connect_timeout_s": float("inf")}, "Config.connect_timeout_s=inf"),
    ({"handshake_timeout_s": -2.0}, "Config.handshake_timeout_s=-2.0"),
    ({"tcp_chunk_bytes": 0}, "Config.tcp_chunk_bytes=0"),
    ({"host_key": ""}, "Config.host_key=''"),
    ({"scope": ""}, "Config.scope=''"),
    ({"gradient_bucket_bytes": -1}, "Config.gradient_bucket_bytes=-1 must be an int >= 0 (0: one bucket"),
    ({"gradient_bucket_bytes": True}, "Config.gradient_bucket_bytes=True"),
    ({"yield_us": -1}, "Config.yield_us=-1 must be an int >= 0"),
])
def test_direct_construction_is_validated(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        Config(**kwargs)
    assert needle in str(info.value)


@pytest.mark.timeout(10)
def test_replace_validates_and_rejects_unknown_fields() -> None:
    config = Config(rank=0, size=2)
    assert config.replace(rank=1).rank == 1
    with pytest.raises(ValueError, match="Config.rank=2"):
        config.replace(rank=2)
    with pytest.raises(ValueError, match="no field"):
        config.replace(ranks=1)


@pytest.mark.timeout(10)
def test_secret_never_appears_in_repr() -> None:
    text = repr(Config(secret=b"top-secret-bytes"))
    assert "top-secret" not in text and "<16 bytes>" in text


@pytest.mark.timeout(10)
def test_launcher_env_round_trips_through_config_from_env() -> None:
    environ = cfg.env_for_rank(1, 3, "127.0.0.1:4000", b"\x01\x02", host_key="h/rank1")
    result = config_from_env(environ=environ)
    assert (result.rank, result.size, result.rendezvous, result.secret, result.host_key) == (
        1, 3, "127.0.0.1:4000", b"\x01\x02", "h/rank1")


@pytest.mark.timeout(10)
def test_host_port_helpers_handle_ipv6() -> None:
    assert cfg.parse_host_port("[::1]:80") == ("::1", 80)
    assert cfg.format_host_port("::1", 80) == "[::1]:80"
    assert cfg.parse_host_port(cfg.format_host_port("h", 1)) == ("h", 1)


@pytest.mark.timeout(10)
def test_default_host_key_starts_with_hostname() -> None:
    key = cfg.default_host_key()
    assert key == socket.gethostname() or key.startswith(socket.gethostname() + ":")


@pytest.mark.timeout(10)
def test_stalls_fail_after_five_minutes_by_default() -> None:
    assert Config().stall_shutdown_s == 300.0 and Config().stall_check_s == 60.0
    assert Config(stall_shutdown_s=0).stall_shutdown_s == 0  # 0 turns it off


@pytest.mark.timeout(10)
def test_horovod_stall_variables_are_honoured_and_ours_win() -> None:
    horovod = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "15", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "30"}
    config = config_from_env(environ=horovod)
    assert (config.stall_check_s, config.stall_shutdown_s) == (15.0, 30.0)
    config = config_from_env(environ={**horovod, cfg.ENV_STALL_SHUTDOWN_TIME: "0"})
    assert (config.stall_check_s, config.stall_shutdown_s) == (15.0, 0.0)
    config = config_from_env(environ={**horovod, "HOROVOD_STALL_CHECK_DISABLE": "1"})
    assert (config.stall_check_s, config.stall_shutdown_s) == (0.0, 0.0)
    with pytest.raises(ValueError, match="HOROVOD_STALL_SHUTDOWN_TIME_SECONDS='soon'"):
        config_from_env(environ={"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "soon"})
    with pytest.raises(ValueError, match="HOROVOD_STALL_CHECK_TIME_SECONDS=-1"):
        config_from_env(environ={"HOROVOD_STALL_CHECK_TIME_SECONDS": "-1"})


@pytest.mark.timeout(10)
def test_waiting_policy_reaches_the_native_mesh_options() -> None:
    mesh = Config().to_native().mesh
    assert (mesh.spin_us, mesh.yield_us) == (-1, 2000)  # the native defaults: Config's are the same
    mesh = Config(spin_us=0, yield_us=0).to_native().mesh
    assert (mesh.spin_us, mesh.yield_us) == (0, 0)
