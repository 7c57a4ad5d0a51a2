"""Scraping the embedded stack's /metrics as Prometheus does: with the stack's metrics token."""

from __future__ import annotations

from pathlib import Path

import requests

from embedded_stack.stack import Stack


def metrics_url(stack: Stack, service: str) -> str:
    url: str = stack.endpoints()["metrics"][service]
    return url


def scrape(stack: Stack, service: str) -> str:
    """The text of service's /metrics, asked with the token the stack made."""
    token = Path(stack.endpoints()["metrics_token"]).read_text().strip()
    answer = requests.get(
        metrics_url(stack, service), headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    answer.raise_for_status()
    return answer.text
