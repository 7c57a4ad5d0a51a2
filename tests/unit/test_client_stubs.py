"""The buf templates for clients in other languages generate stubs of the public API, and the
Go stubs compile (with the example client that uses them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import ROOT
from tests.go_client import build_go_client

BUF = ROOT / "node_modules" / ".bin" / "buf"
PUBLIC_SERVICES = ("warehouse_service", "computing_unit_service", "execution_service")


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


def test_go_stubs_cover_the_public_api_and_compile(tmp_path: Path) -> None:
    journey = build_go_client(tmp_path)  # generates with buf.gen.go.yaml, then go build
    folder = tmp_path / "checkout/clients/go/gen"
    written = {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}
    for service in (*PUBLIC_SERVICES, "result_service"):
        assert f"texera/lake/v1/{service}_grpc.pb.go" in written
    # google/api and google/rpc are genproto's packages, not generated a second time.
    assert not [name for name in written if "/internal/" in name or "google" in name]
    stubs = (folder / "texera/lake/v1/warehouse_service.pb.go").read_text()
    assert "package lakev1" in stubs
    assert '"google.golang.org/genproto/googleapis/api/annotations"' in stubs
    assert journey.is_file()
