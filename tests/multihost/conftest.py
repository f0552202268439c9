"""Tests on a cluster of hosts made on this machine (``testbed``): network namespaces with
their own TEST-NET-2 addresses, each running its own Ray node.  Every test here skips, with the
reason, where namespaces cannot be made (not root, no iproute2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import unavailable

WHY_NOT = unavailable()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if WHY_NOT:
        for item in items:
            if Path(str(item.fspath)).parent == Path(__file__).parent:
                item.add_marker(pytest.mark.skip(reason=f"no multi-host testbed here: {WHY_NOT}"))
