"""The driver's output collector and a task's sender, over real loopback sockets."""

from __future__ import annotations

import io
import queue
import secrets
import threading

import pytest

from collective.launcher import LineSink
from spark_hvd.errors import RankFailure
from spark_hvd.launch.task.output_channel import OutputSender
from spark_hvd.launch.driver.output_collector import OutputCollector, RankConnected, RankFailed

pytestmark = pytest.mark.timeout(30)


@pytest.fixture()
def collector():
    events: queue.SimpleQueue = queue.SimpleQueue()
    out, err = io.StringIO(), io.StringIO()
    secret = secrets.token_bytes(32)
    server = OutputCollector(secret, 2, events.put, LineSink(out), LineSink(err), tail_lines=2,
                             bind_host="127.0.0.1")
    port = server.start()
    yield server, f"127.0.0.1:{port}", secret, events, out, err
    server.stop()


def test_lines_and_failures_reach_the_driver(collector) -> None:
    server, address, secret, events, out, err = collector
    sender = OutputSender.connect(address, secret, 1, 10, on_driver_gone=lambda: None)
    assert events.get(timeout=10) == RankConnected(1)
    for i in range(3):
        sender.send_line("stdout", f"line {i}")
    sender.send_line("stderr", "warning")
    sender.send_failure(RankFailure(1, "ValueError: x", traceback="tb", exit_code=1))
    sender.close()
    event = events.get(timeout=10)
    assert isinstance(event, RankFailed) and event.failure == RankFailure(1, "ValueError: x", "tb", 1)
    assert server.wait_until_all_closed(10)
    assert out.getvalue() == "[1]<stdout>:line 0\n[1]<stdout>:line 1\n[1]<stdout>:line 2\n"
    assert err.getvalue() == "[1]<stderr>:warning\n"
    assert server.tail(1) == ["line 2", "warning"]  # tail_lines=2


def test_a_wrong_secret_or_a_second_connection_for_a_rank_is_refused(collector) -> None:
    server, address, secret, events, _, _ = collector
    with pytest.raises(ConnectionError, match="rejected rank 0"):
        OutputSender.connect(address, b"not the secret", 0, 10, on_driver_gone=lambda: None)
    first = OutputSender.connect(address, secret, 0, 10, on_driver_gone=lambda: None)
    with pytest.raises(ConnectionError, match="rejected rank 0"):
        OutputSender.connect(address, secret, 0, 10, on_driver_gone=lambda: None)
    first.close()
    assert server.connected_ranks() == {0}


def test_the_sender_learns_when_the_driver_closes(collector) -> None:
    server, address, secret, _, _, _ = collector
    gone = threading.Event()
    sender = OutputSender.connect(address, secret, 0, 10, on_driver_gone=gone.set)
    server.stop()
    assert gone.wait(10)
    sender.send_line("stdout", "dropped quietly")  # must not raise once the driver is gone
    sender.close()


def test_closing_the_sender_itself_is_not_mistaken_for_the_driver_leaving(collector) -> None:
    _, address, secret, _, _, _ = collector
    gone = threading.Event()
    OutputSender.connect(address, secret, 0, 10, on_driver_gone=gone.set).close()
    assert not gone.is_set()  # close() joins the watcher, so this is final
