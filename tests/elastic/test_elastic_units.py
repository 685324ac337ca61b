"""The elastic pieces on their own, in one process: discovery parsing, command dispatch, the sampler's
bookkeeping, which errors are retried, and the run wrapper's restore-reform-continue cycle."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import collective
import collective.torch as hvd
from collective.bootstrap import RendezvousClient, RendezvousServer
from collective.config import Config, config_from_env, env_for_elastic_worker, format_host_port
from collective.elastic.discovery import DiscoveryError, discover_hosts, parse_hosts
from collective.elastic.errors import ElasticTimeoutError, HostsUpdatedInterrupt, RoundSupersededError, is_peer_loss
from collective.elastic.membership import forget_client, joined_round, round_bootstrap
from collective.elastic.protocol import ROUND_COUNTER_KEY, Round, round_key
from collective.elastic.sampler import ElasticPartition
from collective.run import is_elastic_command
from collective.errors import InvalidArgumentError, MismatchError, PeerFailureError


def test_parse_hosts_reads_slots_in_order_and_defaults_to_one():
    assert parse_hosts("hostB:2\n# comment\n\nhostA\n", "s") == {"hostB": 2, "hostA": 1}


@pytest.mark.parametrize("text, why", [("hostA:0", "slots >= 1"), ("hostA:x", "'hostA:x'"),
                                       ("host A:2", "'host A:2'"), ("hostA:1\nhostA:2", "listed twice")])
def test_parse_hosts_names_the_bad_line(text, why):
    with pytest.raises(DiscoveryError, match="disc line") as info:
        parse_hosts(text, "disc")
    assert why in str(info.value)


def test_discovery_script_failure_is_named(tmp_path):
    script = tmp_path / "fail.sh"
    script.write_text("#!/bin/sh\necho no hosts >&2\nexit 7\n")
    script.chmod(0o755)
    with pytest.raises(DiscoveryError, match="exited 7: no hosts"):
        discover_hosts(str(script), 10.0)
    with pytest.raises(DiscoveryError, match="could not run"):
        discover_hosts(str(tmp_path / "missing.sh"), 10.0)


def test_elastic_flags_before_the_script_select_elastic_mode():
    assert is_elastic_command(["--min-np", "2", "--host-discovery-script", "d.sh", "train.py"])
    assert is_elastic_command(["-np", "2", "--max-np=4", "train.py"])
    assert not is_elastic_command(["-np", "2", "train.py", "--min-np", "3"])  # the script's own argument
    assert not is_elastic_command(["-np", "2", "train.py"])


def test_partition_deals_every_sample_once_and_redeals_the_rest():
    part = ElasticPartition(10, shuffle=True, seed=3)
    dealt = []
    for rank in range(3):
        part.repartition(rank, 3)
        dealt.append(list(part.indices))
    assert all(len(d) == 4 for d in dealt)  # 10 padded to 12
    assert set().union(*map(set, dealt)) == set(range(10))
    part.repartition(0, 3)
    part.record(part.batch_indices(0, 2))
    processed = set(part.processed)
    assert len(processed) == 2
    redealt = set()
    for rank in range(2):
        part.repartition(rank, 2)
        redealt |= set(part.indices)
    assert redealt == set(range(10)) - processed
    part.set_epoch(1)
    assert part.processed == set()


def test_partition_rejects_a_negative_length():
    with pytest.raises(ValueError, match="length must be >= 0"):
        ElasticPartition(-1)


def test_only_lost_peers_are_retried():
    assert is_peer_loss(PeerFailureError("rank 1 died"))
    assert not is_peer_loss(InvalidArgumentError("bad root"))
    assert not is_peer_loss(MismatchError("shapes differ"))
    assert not is_peer_loss(ValueError("user bug"))
    try:
        try:
            raise PeerFailureError("rank 2 died")
        except PeerFailureError as inner:
            raise RuntimeError("wrapped by a framework") from inner
    except RuntimeError as outer:
        assert is_peer_loss(outer)


def test_object_state_commit_restore_and_callback_checks(one_rank):
    state = hvd.elastic.ObjectState(epoch=0, seen=[])
    state.epoch, state.seen = 3, [1]
    state.commit()
    state.epoch = 5
    state.seen.append(2)
    state.restore()
    assert (state.epoch, state.seen) == (3, [1])
    with pytest.raises(TypeError, match="callable"):
        state.register_reset_callbacks([42])


def test_torch_state_restores_model_optimizer_and_sampler(one_rank):
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = hvd.elastic.ElasticSampler(list(range(8)), shuffle=False)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=1)
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    sampler.record_batch(0, 2)
    state.commit()
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    sampler.record_batch(1, 2)
    state.restore()
    for name, value in model.state_dict().items():
        assert torch.equal(value, committed[name]), name
    assert sampler.processed_indices == {0, 1} and len(sampler) == 6
    with pytest.raises(TypeError, match="torch.nn.Module"):
        hvd.elastic.TorchState(model="not a model")


def test_run_restores_reforms_and_continues_after_a_lost_peer(one_rank):
    state = hvd.elastic.ObjectState(step=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(collective.size())])
    calls = []

    @hvd.elastic.run
    def train(state, fail_at):
        calls.append(state.step)
        while state.step < 4:
            state.step += 1
            if state.step == 2:
                state.commit()
            if state.step == fail_at and len(calls) == 1:
                raise PeerFailureError("rank 1 died")
        return state.step

    assert train(state, 3) == 4
    assert calls == [0, 2]  # the retry started from the commit, not from the step that failed
    assert resets == [1] and collective.is_initialized()


def test_a_retried_error_leaves_nothing_its_frames_held_without_a_garbage_collection(one_rank):
    """A frame that kept the error in a local to raise it later (as a wait for several handles does) forms a
    reference cycle with it. The retry runs without a full collection (too slow on every rank of a host at
    once), so it must not leave the failed call's objects (there, the broken mesh) to one."""
    state = hvd.elastic.ObjectState(step=0)
    held = []

    def wait_then_raise(resource):
        error = PeerFailureError("rank 1 died")
        raise error

    @hvd.elastic.run
    def train(state):
        if not held:
            resource = Held()
            held.append(weakref.ref(resource))
            wait_then_raise(resource)
        return held[0]() is None

    gc.disable()
    try:
        assert train(state), "the failed call's frames still hold what they named"
    finally:
        gc.enable()


class Held:
    """An object a weak reference can follow."""


def test_run_reraises_the_callers_own_errors_without_retry(one_rank):
    state = hvd.elastic.ObjectState(step=0)
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(1)
        raise InvalidArgumentError("root_rank 7 is not a rank of this job")

    with pytest.raises(InvalidArgumentError, match="root_rank 7"):
        train(state)
    assert calls == [1]
    with pytest.raises(TypeError, match="State first"):
        train("not a state")


def test_hosts_updated_interrupt_reruns_without_restoring(one_rank):
    state = hvd.elastic.ObjectState(step=0)
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.step)
        state.step += 1
        if len(calls) == 1:
            state.commit()
            raise HostsUpdatedInterrupt()
        return state.step

    assert train(state) == 2
    assert calls == [0, 1]


@pytest.fixture
def store():
    secret = b"s" * 32
    with RendezvousServer("127.0.0.1", 0, secret=secret) as server:
        with RendezvousClient("127.0.0.1", server.address[1], 10.0, secret=secret) as driver:
            yield format_host_port(*server.address), secret, driver
    forget_client()


def _worker_config(rendezvous: str, secret: bytes, worker: str, timeout_s: float) -> Config:
    env = env_for_elastic_worker(worker, rendezvous, secret, "hostA", timeout_s)
    return config_from_env(environ=env)


def test_elastic_settings_come_from_the_launchers_variables_and_bad_ones_are_named():
    env = env_for_elastic_worker("hostA:0", "127.0.0.1:1", b"k" * 32, "hostA", 7.5)
    config = config_from_env(environ=env)
    assert (config.elastic_worker, config.elastic_timeout_s, config.rank) == ("hostA:0", 7.5, None)
    with pytest.raises(ValueError, match="COLLECTIVE_ELASTIC_TIMEOUT=-1.0 must be a positive"):
        config_from_env(environ={**env, "COLLECTIVE_ELASTIC_TIMEOUT": "-1"})


def test_a_worker_no_round_lists_times_out_by_name(store):
    rendezvous, secret, driver = store
    driver.set(round_key(1), Round(1, ("hostA:0",)).encode())
    driver.add(ROUND_COUNTER_KEY, 1)
    with pytest.raises(ElasticTimeoutError, match=r"'hostB:0': no round including it was formed within 1.5s \(3 times the elastic timeout of 0.5s"):
        round_bootstrap(_worker_config(rendezvous, secret, "hostB:0", 0.5))


def test_joining_a_round_that_is_re_formed_meanwhile_gives_up_at_once(store):
    rendezvous, secret, driver = store
    driver.set(round_key(1), Round(1, ("hostA:0", "hostA:1")).encode())
    driver.add(ROUND_COUNTER_KEY, 1)
    bootstrap = round_bootstrap(_worker_config(rendezvous, secret, "hostA:0", 30.0))
    assert (bootstrap.rank, bootstrap.size) == (0, 2)
    # hostA:1 never contributes: the driver re-forms without it, and the waiting member learns it.
    driver.set(round_key(2), Round(2, ("hostA:0",)).encode())
    driver.add(ROUND_COUNTER_KEY, 1)
    with pytest.raises(RoundSupersededError, match="round 1 was re-formed as round 2 while worker 'hostA:1'"):
        bootstrap.allgather(b"me", 30.0)
    assert is_peer_loss(RoundSupersededError("x"))
    again = round_bootstrap(_worker_config(rendezvous, secret, "hostA:0", 30.0))
    assert (again.size, joined_round()) == (1, 2)
