"""Commits kept outside the job's processes (collective.elastic.durable), in one process: a TorchState's
snapshot starts another state where it stopped, with the reset callbacks run; a lost peer is not re-formed in
process; rank 0's commits reach the sink. And the rank child's CommitSender: newest wins, size limit named."""

from __future__ import annotations

import pickle
import threading

import pytest
import torch

import collective.torch as hvd
from collective.elastic import durable
from collective.errors import PeerFailureError
from spark_hvd.errors import CommitTooLargeError
from spark_hvd.launch.rank.elastic_rank import CommitSender


@pytest.fixture
def single_rank():
    hvd.init()
    yield
    durable.install(None)
    hvd.shutdown()


def make_state(step: int = 0) -> tuple[hvd.elastic.TorchState, torch.nn.Linear]:
    model = torch.nn.Linear(3, 1).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return hvd.elastic.TorchState(model=model, optimizer=optimizer, step=step), model


def test_a_snapshot_starts_a_new_state_where_the_old_one_committed(single_rank):
    sunk = []
    durable.install(durable.DurableCommits(sink=sunk.append))
    old, old_model = make_state()
    with torch.no_grad():
        old_model.weight.fill_(2.5)
    old.step = 7
    old.commit()
    assert len(sunk) == 1
    kept = pickle.loads(pickle.dumps(sunk[0]))   # it crossed processes

    new, new_model = make_state()
    resets = []
    new.register_reset_callbacks([lambda: resets.append(new.step)])
    durable.install(durable.DurableCommits(sink=sunk.append, initial=kept))

    @hvd.elastic.run
    def train(state):
        return state.step, new_model.weight.detach().clone()

    step, weight = train(new)
    assert step == 7 and torch.equal(weight, torch.full((1, 3), 2.5, dtype=torch.float64))
    assert resets == [7]   # the learning-rate rule runs after starting from a kept commit


def test_with_durable_commits_a_lost_peer_ends_the_run_instead_of_reforming(single_rank):
    durable.install(durable.DurableCommits(sink=lambda snapshot: None))
    state, _ = make_state()
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(1)
        raise PeerFailureError("rank 1 vanished")

    with pytest.raises(PeerFailureError):
        train(state)
    assert calls == [1]


def test_a_snapshot_of_other_objects_is_refused_by_name(single_rank):
    state, _ = make_state()
    snapshot = state.snapshot()
    other = hvd.elastic.TorchState(model=torch.nn.Linear(3, 1), step=0)
    with pytest.raises(ValueError, match=r"commit of \['model', 'optimizer'\].*holds \['model'\]"):
        other.load_snapshot(snapshot)


def test_commit_sender_sends_the_newest_pending_snapshot_and_flushes_on_close():
    sent: list[tuple[int, bytes]] = []
    gate = threading.Event()

    def send(header, blob):
        gate.wait(10)   # holds the first send while two more commits arrive
        sent.append((header["seq"], pickle.loads(blob)))
        return True

    sender = CommitSender(1 << 20, send)
    sender.offer({"step": 1})
    sender.offer({"step": 2})
    sender.offer({"step": 3})
    gate.set()
    sender.close(10)
    assert sent[-1] == (3, {"step": 3})
    assert len(sent) <= 2   # step 2 was replaced before it left, unless the thread took it first


def test_commit_sender_names_a_commit_over_the_limit_at_the_next_commit():
    sender = CommitSender(100, lambda header, blob: True)
    sender.offer({"weights": b"x" * 1000})
    sender.close(10)
    with pytest.raises(CommitTooLargeError, match=r"over max_commit_bytes=100"):
        sender.offer({"step": 2})


def test_a_commit_over_the_limit_goes_to_the_store_and_the_driver_deletes_what_it_replaced(tmp_path):
    import cloudpickle

    from spark_hvd import Store
    from spark_hvd.launch.driver.elastic_runner import _KeptCommit
    from spark_hvd.launch.driver.output_collector import RankCommitted
    from spark_hvd.launch.stored_commits import CommitSpill, stored_path

    spill = CommitSpill.for_run(Store.create(str(tmp_path)))
    sent: list[tuple[int, bytes]] = []
    sender = CommitSender(100, lambda header, blob: sent.append((header["seq"], blob)) or True, spill=spill)
    big = {"weights": b"x" * 1000}
    sender.offer(big)
    sender.close(10)
    ((seq, reference),) = sent
    path = stored_path(reference)
    assert path is not None and spill.store.exists(path) and len(reference) < 200, reference
    assert cloudpickle.loads(spill.read(reference)) == big

    kept = _KeptCommit(spill)
    kept.keep(1, RankCommitted(0, seq, reference))
    kept.keep(1, RankCommitted(0, seq + 1, pickle.dumps({"step": 2})))   # a small one: kept in memory
    assert not spill.store.exists(path), "the replaced commit's file was left behind"
    assert kept.blob == pickle.dumps({"step": 2})
    spill.remove_all()
    assert spill.store.list(spill.store.get_runs_path()) == []
