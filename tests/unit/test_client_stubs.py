"""The buf templates for clients in other languages generate stubs of the public API."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

BUF = ROOT / "node_modules" / ".bin" / "buf"
PUBLIC_SERVICES = ("warehouse_service", "computing_unit_service", "execution_service")
GO_PLUGINS = ("protoc-gen-go", "protoc-gen-go-grpc")


def generate(template: str, out: Path) -> set[str]:
    """Runs buf generate with template into out; the files it wrote, relative to out."""
    subprocess.run(
        [str(BUF), "generate", "--template", template, "-o", str(out)],
        cwd=ROOT,
        check=True,
        timeout=120,
        env={"PATH": f"{BUF.parent}:/usr/local/bin:/usr/bin:/bin"},
    )
    return {str(path.relative_to(out)) for path in out.rglob("*") if path.is_file()}


def test_typescript_stubs_cover_the_public_api_and_the_error_details(tmp_path: Path) -> None:
    written = generate("buf.gen.yaml", tmp_path)
    folder = "clients/typescript/src/gen"
    for service in (*PUBLIC_SERVICES, "result_service"):
        assert f"{folder}/texera/lake/v1/{service}_pb.ts" in written
    assert f"{folder}/google/rpc/error_details_pb.ts" in written
    assert not [name for name in written if "/internal/" in name]


@pytest.mark.skipif(
    not all(shutil.which(plugin) for plugin in GO_PLUGINS),
    reason="protoc-gen-go and protoc-gen-go-grpc are not on PATH "
    "(Debian: apt-get install protoc-gen-go protoc-gen-go-grpc)",
)
def test_go_stubs_cover_the_public_api(tmp_path: Path) -> None:
    written = generate("buf.gen.go.yaml", tmp_path)
    folder = tmp_path / "clients/go/gen/texera/lake/v1"
    for service in (*PUBLIC_SERVICES, "result_service"):
        assert f"clients/go/gen/texera/lake/v1/{service}_grpc.pb.go" in written
    assert not [name for name in written if "/internal/" in name or "google" in name]
    stubs = (folder / "warehouse_service.pb.go").read_text()
    assert "package lakev1" in stubs
