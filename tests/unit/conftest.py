"""Fixtures of the Kubernetes launcher's tests: the fake API server of kubernetes_fake (a Pod
lingers for one read once deleted) and its URL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.kubernetes_fake import FakeKubernetesApi, serve


@pytest.fixture
def api() -> FakeKubernetesApi:
    return FakeKubernetesApi(grace_reads=1)


@pytest.fixture
def url(api: FakeKubernetesApi) -> Iterator[str]:
    with serve(api) as url:
        yield url
