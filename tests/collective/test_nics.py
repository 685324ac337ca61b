"""Config.nics (Horovod's nics): parsing, and how it picks the address a rank listens on and advertises."""

from __future__ import annotations

import pytest

from collective import config as cfg
from collective.bootstrap.interfaces import interface_addresses, mesh_host, nic_addresses
from collective.config import Config, config_from_env, env_for_rank, normalize_nics

pytestmark = pytest.mark.timeout(10)


def _other_interface() -> tuple[str, str]:
    """A non-loopback interface of this host that has an IPv4 address."""
    for name, address in interface_addresses().items():
        if address is not None and not address.startswith("127."):
            return name, address
    pytest.skip("this host has no non-loopback interface with an IPv4 address")


def test_loopback_is_listed_with_its_address() -> None:
    assert interface_addresses()["lo"] == "127.0.0.1"


@pytest.mark.parametrize("value, expected", [
    (None, None), ([], None), (set(), None), (["lo"], ("lo",)), (("eth0", "lo", "eth0"), ("eth0", "lo")),
    ({"lo", "eth0"}, ("eth0", "lo")),  # a set is sorted, so every rank reads it alike
])
def test_nics_are_normalised_to_a_tuple(value: object, expected: tuple[str, ...] | None) -> None:
    assert normalize_nics(value) == expected
    assert Config(nics=value).nics == expected


@pytest.mark.parametrize("value, why", [
    ("lo", "not a string"), (b"lo", "not a string"), (42, "list or set"), ([""], "not an interface name"),
    (["lo", 1], "not an interface name"), (["eth0,lo"], "not an interface name"), ([" lo"], "not an interface name"),
])
def test_bad_nics_name_the_value(value: object, why: str) -> None:
    with pytest.raises(ValueError, match=why) as raised:
        Config(nics=value)
    assert str(raised.value).startswith("Config.nics=")


def test_nics_travel_through_the_environment() -> None:
    env = env_for_rank(0, 2, "127.0.0.1:1234", b"s", nics=("eth0", "lo"))
    assert env[cfg.ENV_NICS] == "eth0,lo"
    assert config_from_env(environ=env).nics == ("eth0", "lo")
    assert cfg.ENV_NICS not in env_for_rank(0, 2, "127.0.0.1:1234", b"s")


def test_a_bad_nics_variable_is_named() -> None:
    with pytest.raises(ValueError, match="COLLECTIVE_NICS"):
        config_from_env(environ={cfg.ENV_NICS: "lo, bad name"})


def test_without_nics_the_bootstrap_address_is_advertised() -> None:
    assert mesh_host(None, (), "10.1.2.3") == "10.1.2.3"
    assert mesh_host("10.9.9.9", (), "10.1.2.3") == "10.9.9.9"
    assert mesh_host(None, (), None) == "127.0.0.1"


def test_nics_pick_an_address_of_the_named_interface() -> None:
    name, address = _other_interface()
    assert mesh_host(None, ("lo",), address) == "127.0.0.1"
    assert mesh_host(None, (name,), "127.0.0.1") == address
    assert mesh_host(None, (name,), None) == address


def test_the_bootstrap_address_wins_when_it_is_on_a_named_interface() -> None:
    name, address = _other_interface()
    assert mesh_host(None, (name, "lo"), "127.0.0.1") == "127.0.0.1"
    assert mesh_host(None, ("lo", name), address) == address
    assert nic_addresses((name, "lo")) == [address, "127.0.0.1"]


def test_an_unknown_interface_is_named_with_the_ones_that_exist() -> None:
    with pytest.raises(ValueError) as raised:
        mesh_host(None, ("lo", "nosuchif0"), "127.0.0.1")
    message = str(raised.value)
    assert "no network interface named 'nosuchif0'" in message
    assert "lo (127.0.0.1)" in message


def test_an_advertise_host_outside_the_nics_is_refused() -> None:
    with pytest.raises(ValueError, match="advertise_host='10.255.255.1' is not an address"):
        mesh_host("10.255.255.1", ("lo",), None)
    assert mesh_host("127.0.0.1", ("lo",), None) == "127.0.0.1"


def test_interfaces_without_ipv4_are_skipped_but_one_must_remain() -> None:
    bare = [name for name, address in interface_addresses().items() if address is None]
    if not bare:
        pytest.skip("every interface of this host has an IPv4 address")
    assert mesh_host(None, (bare[0], "lo"), None) == "127.0.0.1"
    with pytest.raises(ValueError, match="none of these interfaces has an IPv4 address"):
        mesh_host(None, (bare[0],), None)


def test_spark_start_timeout_reads_horovods_variable() -> None:
    assert cfg.spark_start_timeout_s({}) == 600.0
    assert cfg.spark_start_timeout_s({cfg.ENV_SPARK_START_TIMEOUT: " 42.5 "}) == 42.5
    for raw in ("soon", "0", "-3", "inf"):
        with pytest.raises(ValueError, match=cfg.ENV_SPARK_START_TIMEOUT):
            cfg.spark_start_timeout_s({cfg.ENV_SPARK_START_TIMEOUT: raw})


def test_a_loopback_rank_among_remote_ones_is_named() -> None:
    from collective.bootstrap.interfaces import check_reachable
    local = [{"host": "127.0.0.1", "host_key": f"a/rank{r}"} for r in range(3)]
    check_reachable(local)  # one machine (or host_key_per_rank): loopback everywhere is fine
    check_reachable([{"host": "127.0.0.1", "host_key": "a"}, {"host": "10.0.0.2", "host_key": "a"}])
    mixed = [{"host": "10.0.0.1", "host_key": "a"}, {"host": "127.0.0.1", "host_key": "b"}]
    with pytest.raises(ValueError, match=r"rank 1 advertises the loopback address 127.0.0.1, but ranks \[0\]"):
        check_reachable(mixed)
