"""A hostile peer against the mesh listeners while a real three-rank job forms and runs an allreduce.

Every test runs the same job twice, unattacked and attacked, and bounds the ratio of their wall times
generously: a stranger, whatever it sends or withholds, must cost the job (almost) nothing.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator

import pytest

from mesh_job import MeshJob
from strangers import ANSWER_BYTES, CHALLENGE_BYTES, Stranger, Strangers, raise_fd_limit
from tap import AFTER_ANSWER, AT_ONCE, Tap

SIZE = 3
CONNECT_TIMEOUT_S = 30.0  # far above what the job needs: an attack that stalls it fails the ratio first
Attack = Callable[[Strangers, list[tuple[str, int]]], list[Stranger]]


def listen_queue_limit() -> int:
    with open("/proc/sys/net/core/somaxconn") as f:
        return int(f.read())


def timed_job(attack: Attack | None = None, wait_for: int | None = None,
              **job_args: object) -> tuple[float, list[Stranger]]:
    """Runs the job with `attack` made against its listeners before any rank dials (at least `wait_for` of
    its connections open, default all); returns the seconds from the ranks' release to their last result,
    and the strangers."""
    with MeshJob(SIZE, connect_timeout_s=CONNECT_TIMEOUT_S, **job_args) as job, Strangers() as strangers:
        listeners = job.listeners()
        made = attack(strangers, listeners) if attack else []
        strangers.wait_connected(made, timeout_s=30, at_least=wait_for)
        job.release()
        results, elapsed = job.results(timeout_s=CONNECT_TIMEOUT_S + 30)
        assert all(r["ok"] for r in results), results
        # Before the strangers close: what the listeners did to them is checked by the callers.
        strangers.wait_settled(made, timeout_s=30)
    return elapsed, made


def assert_not_delayed(attack: Attack, wait_for: int | None = None, **job_args: object) -> list[Stranger]:
    unattacked, _ = timed_job(**job_args)
    attacked, made = timed_job(attack, wait_for, **job_args)
    assert attacked < 3 * unattacked + 2.0, (
        f"the attacked job took {attacked:.2f} s against {unattacked:.2f} s unattacked "
        f"(ratio {attacked / unattacked:.1f})")
    print(f"attacked {attacked:.3f} s, unattacked {unattacked:.3f} s, ratio {attacked / unattacked:.2f}")
    return made


def on_every_listener(count: int, **how: object) -> Attack:
    return lambda strangers, listeners: [s for address in listeners for s in strangers.open(address, count, **how)]


def assert_refused_after_the_challenge(made: list[Stranger]) -> None:
    """The listener sent its challenge and nothing more (no proof: the answer was not accepted), then hung up."""
    assert all(s.hung_up for s in made), f"{sum(not s.hung_up for s in made)} of {len(made)} still open"
    sent = {len(s.received) for s in made}
    assert sent == {CHALLENGE_BYTES}, f"the listener sent {sent} bytes to strangers"


@pytest.fixture(scope="module")
def recorded() -> tuple[bytes, list[bytes]]:
    """A job's secret and its ranks' real answers to rank 0's challenges, copied by a man in the middle."""
    with MeshJob(SIZE) as job:
        listeners = job.listeners()
        tap = Tap(listeners[0])
        try:
            job.release(dial={0: tap.port})
            results, _ = job.results(timeout_s=60)
            assert all(r["ok"] for r in results), results
        finally:
            tap.close()
    assert len(tap.answers) == 2 * (SIZE - 1), tap.answers
    return job.secret, tap.answers


@pytest.mark.timeout(180)
def test_idle_connections_do_not_delay_the_job() -> None:
    made = assert_not_delayed(on_every_listener(20))
    assert all(s.hung_up or s.failed for s in made)


@pytest.mark.timeout(180)
def test_random_bytes_do_not_delay_the_job() -> None:
    def attack(strangers: Strangers, listeners: list[tuple[str, int]]) -> list[Stranger]:
        return (on_every_listener(5, send=os.urandom(ANSWER_BYTES))(strangers, listeners)
                + on_every_listener(5, send=os.urandom(4096))(strangers, listeners)
                # One byte short of an answer, then silence: the listener must not wait for the rest.
                + on_every_listener(10, send=os.urandom(ANSWER_BYTES - 1))(strangers, listeners))

    made = assert_not_delayed(attack)
    answered = [s for s in made if s.received]
    assert answered and all(len(s.received) == CHALLENGE_BYTES for s in answered)


@pytest.mark.timeout(180)
def test_oversized_frames_do_not_delay_the_job() -> None:
    # A control frame's header (magic "SHVD", a type, a 64-bit length) claiming 1 GiB, then part of its body.
    header = b"SHVD" + (2).to_bytes(4, "little") + (1 << 30).to_bytes(8, "little")

    def attack(strangers: Strangers, listeners: list[tuple[str, int]]) -> list[Stranger]:
        return (on_every_listener(10, stream_bytes=16 << 20)(strangers, listeners)
                + on_every_listener(10, send=header + os.urandom(ANSWER_BYTES - 1 - len(header)))(strangers, listeners))

    made = assert_not_delayed(attack)
    assert all(s.hung_up or s.failed for s in made)


def forge(real: bytes) -> Callable[[bytes], bytes]:
    """A well-formed answer made without the secret: a fresh nonce and a real rank's rank, world size and
    channel, but a random MAC."""
    return lambda challenge: os.urandom(32) + real[32:48] + os.urandom(32)


def held_back(answer: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """The same answer less its last byte, which never comes: a stranger holding its place."""
    return lambda challenge: answer(challenge)[:-1]


@pytest.mark.timeout(240)
def test_forged_answers_are_refused_and_do_not_delay_the_job(recorded: tuple[bytes, list[bytes]]) -> None:
    secret, answers = recorded

    def attack(strangers: Strangers, listeners: list[tuple[str, int]]) -> list[Stranger]:
        whole = [s for real in answers for s in strangers.open(listeners[0], 5, answer=forge(real))]
        held = [s for real in answers for s in strangers.open(listeners[0], 3, answer=held_back(forge(real)))]
        return whole + held

    made = assert_not_delayed(attack, secret=secret)
    assert_refused_after_the_challenge(made)


@pytest.mark.timeout(240)
def test_replayed_handshakes_are_refused_and_do_not_delay_the_job(recorded: tuple[bytes, list[bytes]]) -> None:
    secret, answers = recorded

    def attack(strangers: Strangers, listeners: list[tuple[str, int]]) -> list[Stranger]:
        replay = [lambda _, real=real: real for real in answers]
        whole = [s for answer in replay for s in strangers.open(listeners[0], 5, answer=answer)]
        held = [s for answer in replay for s in strangers.open(listeners[0], 3, answer=held_back(answer))]
        return whole + held

    made = assert_not_delayed(attack, secret=secret)
    assert_refused_after_the_challenge(made)


@pytest.mark.timeout(240)
def test_a_thousand_concurrent_connections_do_not_delay_the_job() -> None:
    # The strangers live in this process: it needs a descriptor for each, on top of pytest's own.
    count = 1000
    if raise_fd_limit(count + 200) < count + 200:
        count = raise_fd_limit(count + 200) - 200
        assert count >= 300, "the hard RLIMIT_NOFILE leaves too few descriptors for a flood"
    made = assert_not_delayed(lambda strangers, listeners: strangers.open(listeners[0], count),
                              wait_for=min(count, listen_queue_limit() // 2))
    assert all(s.hung_up or s.failed for s in made)


@pytest.mark.timeout(180)
def test_a_listener_at_its_open_file_limit_still_forms_the_mesh() -> None:
    # Rank 0 keeps only a few descriptors free: its accepts hit EMFILE while strangers hold the rest.
    job_args: dict = {"rank_args": {0: ["fd-headroom", "8"]}, "env": {"COLLECTIVE_DISABLE_SHM": "1"}}
    unattacked, _ = timed_job(**job_args)
    with MeshJob(SIZE, connect_timeout_s=CONNECT_TIMEOUT_S, **job_args) as job, Strangers() as strangers:
        listeners = job.listeners()
        strangers.wait_connected(strangers.open(listeners[0], 30), timeout_s=30)
        job.release()
        results, attacked = job.results(timeout_s=CONNECT_TIMEOUT_S + 30)
        assert all(r["ok"] for r in results), results
        log = job.output(0)
    assert attacked < 3 * unattacked + 2.0, f"{attacked:.2f} s attacked against {unattacked:.2f} s"
    print(f"attacked {attacked:.3f} s, unattacked {unattacked:.3f} s, ratio {attacked / unattacked:.2f}")
    assert log.count("open-file limit") == 1, log


@pytest.mark.timeout(120)
def test_a_rank_that_never_dials_is_named_and_the_strangers_counted() -> None:
    with MeshJob(SIZE, connect_timeout_s=5) as job, Strangers() as strangers:
        listeners = job.listeners()
        made = strangers.open(listeners[0], 10) + strangers.open(listeners[0], 3, send=os.urandom(ANSWER_BYTES))
        strangers.wait_connected(made, timeout_s=30)
        job.release(ranks=[0, 1])  # rank 2 never dials
        failure = job.failure(0, timeout_s=60)
    assert failure["type"] == "CollectiveTimeoutError", failure
    assert failure["rank"] == 2, failure
    assert "rank(s) 2" in failure["message"] and "13 stranger" in failure["message"], failure


@pytest.mark.timeout(120)
def test_a_rank_retries_reset_handshakes_until_its_deadline() -> None:
    # Rank 1's first two attempts to reach rank 0 are reset: one on connecting, one after it answered.
    with MeshJob(2) as job:
        listeners = job.listeners()
        tap = Tap(listeners[0], resets=(AT_ONCE, AFTER_ANSWER))
        try:
            job.release(dial={0: tap.port})
            results, _ = job.results(timeout_s=60)
        finally:
            tap.close()
    assert all(r["ok"] for r in results), results
    assert tap.resets_done == 2


@pytest.mark.timeout(240)
def test_strangers_on_a_running_jobs_listener_are_dropped_while_it_runs(recorded: tuple[bytes, list[bytes]]) -> None:
    # The mesh listener stays open for the life of the job (pairs connect on first use), so it meets
    # strangers while collectives run: each is challenged, refused or dropped at its handshake deadline,
    # more than the cap of pending handshakes are evicted, and none of it stops the job.
    secret, answers = recorded
    with MeshJob(SIZE, count=1024, rank_args={r: ["live"] for r in range(SIZE)}, secret=secret) as job, \
            Strangers() as strangers:
        listeners = job.listeners()
        job.release()
        for rank in range(SIZE):
            job.wait_for_line(rank, "FORMED", timeout_s=60)
        silent = on_every_listener(10)(strangers, listeners) + strangers.open(listeners[0], 80)
        noisy = on_every_listener(5, send=os.urandom(ANSWER_BYTES))(strangers, listeners)
        forged = [s for real in answers for s in strangers.open(listeners[0], 3, answer=forge(real))]
        replayed = [s for real in answers for s in strangers.open(listeners[0], 3, answer=lambda _, real=real: real)]
        made = silent + noisy + forged + replayed
        strangers.wait_connected(made, timeout_s=30)
        strangers.wait_settled(made, timeout_s=60)
        open_while_running = [s for s in made if not (s.hung_up or s.failed)]
        for rank in range(SIZE):
            job.tell(rank, "stop")
        results, _ = job.results(timeout_s=60)
    assert not open_while_running, f"{len(open_while_running)} of {len(made)} strangers still held by the job"
    assert all(r["ok"] for r in results), results
    assert_refused_after_the_challenge(forged + replayed)
    assert {len(s.received) for s in noisy} == {CHALLENGE_BYTES}
