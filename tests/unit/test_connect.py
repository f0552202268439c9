"""The embedded Ray instance starts with safe defaults: its own instance, no dashboard, nothing
listening beyond 127.0.0.1, token authentication untouched."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from cluster import connect  # noqa: E402


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


def test_joining_a_cluster_passes_the_address_through(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {})
    connect("ray://head:10001")
    assert calls[0]["address"] == "ray://head:10001"
