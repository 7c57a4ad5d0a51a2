"""Page tokens are opaque, tamper-evident and bound to their list and request."""

from __future__ import annotations

import pytest
from google.protobuf.struct_pb2 import Struct, Value

from service_runtime.errors import ServiceError
from service_runtime.pagination import PageTokens, fingerprint, fitting, page_size

SECRET = "k" * 40


def test_a_token_carries_its_position_back() -> None:
    tokens = PageTokens(SECRET, "warehouses")
    token = tokens.issue(
        {"t": "2026-01-01T00:00:00+00:00", "id": "abc"}, fingerprint("alice", ["ACTIVE"])
    )
    assert tokens.read(token, fingerprint("alice", ["ACTIVE"])) == {
        "t": "2026-01-01T00:00:00+00:00",
        "id": "abc",
    }
    assert "abc" not in token.split(".")[1]  # the tag is not the payload


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t + "x",
        lambda t: "A" + t[1:],
        lambda t: t.split(".")[0],
        lambda t: "garbage",
        lambda t: "",
    ],
    ids=["appended", "edited payload", "no tag", "garbage", "empty"],
)
def test_tampered_tokens_are_refused(mangle: object) -> None:
    tokens = PageTokens(SECRET, "warehouses")
    token = tokens.issue({"offset": 10}, "f")
    with pytest.raises(ServiceError) as raised:
        tokens.read(mangle(token), "f")  # type: ignore[operator]
    assert raised.value.violations[0].field == "page_token"


def test_tokens_do_not_cross_lists_requests_or_keys() -> None:
    token = PageTokens(SECRET, "warehouses").issue({"offset": 1}, "f")
    for reader, request in (
        (PageTokens(SECRET, "executions"), "f"),
        (PageTokens(SECRET, "warehouses"), "other"),
        (PageTokens("z" * 40, "warehouses"), "f"),
    ):
        with pytest.raises(ServiceError):
            reader.read(token, request)


def test_page_size_defaults_caps_and_refuses_negatives() -> None:
    assert page_size(0, default=50, maximum=500) == 50
    assert page_size(10_000, default=50, maximum=500) == 500
    assert page_size(7, default=50, maximum=500) == 7
    with pytest.raises(ServiceError):
        page_size(-1, default=50, maximum=500)


def test_a_page_holds_what_fits_its_bytes_and_always_at_least_one_element() -> None:
    small = [Struct(fields={"x": Value(string_value="a" * 90)}) for _ in range(10)]
    each = small[0].ByteSize() + 6
    assert fitting(small, 10 * each) == 10
    assert fitting(small, 3 * each) == 3
    assert fitting(small, 3 * each - 1) == 2
    huge = [Struct(fields={"x": Value(string_value="b" * 10_000)}), *small]
    assert fitting(huge, 100) == 1  # the page still moves on
    assert fitting([], 100) == 0
