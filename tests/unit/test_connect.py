"""The embedded Ray instance starts with safe defaults: its own instance, no dashboard, nothing
listening beyond 127.0.0.1, token authentication untouched."""

from __future__ import annotations

import logging
import socket
import time

import pytest

ray = pytest.importorskip("ray")

from cluster import connect, set_ray_log_level  # noqa: E402
from msrl.core import ClusterError  # noqa: E402


def test_embedded_instance_has_no_dashboard_and_stays_on_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    assert connect(None, num_cpus=3) == {"CPU": 2.0}
    (kwargs,) = calls
    assert kwargs["address"] == "local"  # never attaches to a cluster it happens to find
    assert kwargs["include_dashboard"] is False
    assert kwargs["dashboard_host"] == "127.0.0.1"
    assert kwargs["num_cpus"] == 3
    assert not any("auth" in key.lower() or "token" in key.lower() for key in kwargs)


def test_rays_log_lines_are_shown_from_error_on_unless_asked_for_more(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {})
    connect(None)
    assert calls[-1]["logging_level"] == logging.ERROR  # its informational warnings stay in its log files
    before = set_ray_log_level(logging.INFO)  # msrl ... --verbose
    try:
        connect(None)
        with _listening() as server:
            connect(f"ray://127.0.0.1:{server.getsockname()[1]}")
    finally:
        assert set_ray_log_level(before) == logging.INFO
    assert [c["logging_level"] for c in calls[1:]] == [logging.INFO, logging.INFO]
    assert not any("auth" in key.lower() or "token" in key.lower() for c in calls for key in c)


def test_joining_a_cluster_passes_the_address_through(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {})
    with _listening() as server:  # something answers there, as a cluster's would
        address = f"ray://127.0.0.1:{server.getsockname()[1]}"
        connect(address)
    assert calls[0]["address"] == address


def _listening() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def _closed_port() -> int:
    with _listening() as server:  # the port is free again once closed: connecting is refused
        return server.getsockname()[1]


def test_joining_an_address_where_nothing_listens_is_one_error_and_no_ray_init(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    address = f"ray://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(ClusterError, match=f"no Ray cluster answers at {address}: .*leave out --address"):
        connect(address)
    assert time.monotonic() - start < 10.0  # ray.init would retry for minutes
    assert calls == []


def test_an_address_ray_cannot_read_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(ClusterError, match="cannot join the Ray cluster at 'nonsense'"):
        connect("nonsense")


def test_something_that_is_not_ray_answering_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**kwargs: object) -> None:
        raise ConnectionError(f"Failed to connect to Ray cluster at {kwargs['address']}")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with _listening() as server:
        address = f"ray://127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(ClusterError, match=f"cannot join the Ray cluster at '{address}': Failed to connect"):
            connect(address)


class _Start:
    """``ray.init`` that times out starting ``failures`` times, then starts; ``ray.shutdown`` counted."""

    def __init__(self, failures: int, message: str = "The current node timed out during startup.") -> None:
        self.failures, self.message, self.inits, self.shutdowns = failures, message, 0, 0

    def init(self, **kwargs: object) -> None:
        self.inits += 1
        if self.inits <= self.failures:
            raise Exception(self.message)

    def shutdown(self) -> None:
        self.shutdowns += 1


def _patch(monkeypatch: pytest.MonkeyPatch, start: _Start) -> None:
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", start.init)
    monkeypatch.setattr(ray, "shutdown", start.shutdown)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})


def test_an_embedded_start_that_times_out_once_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    start = _Start(failures=1)
    _patch(monkeypatch, start)
    assert connect(None, num_cpus=2) == {"CPU": 2.0}
    assert (start.inits, start.shutdowns) == (2, 1)  # the half-started instance is shut down first


def test_an_embedded_start_that_times_out_twice_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    start = _Start(failures=2)
    _patch(monkeypatch, start)
    with pytest.raises(ClusterError, match=r"Ray did not start, twice: .*timed out during startup.* cores"):
        connect(None, num_cpus=2)
    assert (start.inits, start.shutdowns) == (2, 2)


def test_other_embedded_start_failures_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    start = _Start(failures=1, message="something else")
    _patch(monkeypatch, start)
    with pytest.raises(Exception, match="something else"):
        connect(None, num_cpus=2)
    assert start.inits == 1
