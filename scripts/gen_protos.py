"""Generates the Python code of the texera.lake APIs from protos/.

Writes messages (`*_pb2.py`), gRPC stubs (`*_pb2_grpc.py`), their typed
stubs (`*.pyi`, from mypy-protobuf) into texera/lake/v1/ (the public API) and
texera/lake/internal/v1/ (the registry's internal API), and the descriptor set
of both with comments and imports (texera/lake/api_descriptor_set.binpb, which
server reflection serves). With --check it
generates into a scratch folder instead and exits 1 if the committed code
differs, naming the stale files.
"""

from __future__ import annotations

import argparse
import filecmp
import subprocess
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PACKAGE_DIRS = (Path("texera", "lake", "v1"), Path("texera", "lake", "internal", "v1"))
DESCRIPTOR_SET = Path("texera", "lake", "api_descriptor_set.binpb")


def generate(out_root: Path) -> None:
    """Runs protoc over every .proto of the packages into out_root."""
    proto_files = sorted(
        str(p.relative_to(PROTO_ROOT))
        for package in PACKAGE_DIRS
        for p in (PROTO_ROOT / package).glob("*.proto")
    )
    well_known = Path(protoc.__file__).parent / "_proto"
    scripts = Path(sys.executable).parent  # mypy-protobuf's plugins live beside this interpreter
    args = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--plugin=protoc-gen-mypy={scripts / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={scripts / 'protoc-gen-mypy_grpc'}",
        f"--proto_path={PROTO_ROOT}",
        f"--proto_path={well_known}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        f"--descriptor_set_out={out_root / DESCRIPTOR_SET}",
        "--include_source_info",
        "--include_imports",
        *proto_files,
    ]
    # A child process, so that the plugins' chatter on stderr shows only on failure.
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"protoc failed:\n{result.stderr}")
    packages = {parent for package in PACKAGE_DIRS for parent in (package, *package.parents)}
    for package in packages - {Path()}:
        init = out_root / package / "__init__.py"
        init.write_text('"""Generated from protos/ by scripts/gen_protos.py; do not edit."""\n')
    for package in PACKAGE_DIRS:
        (out_root / package / "py.typed").write_text("")


def generated_files(root: Path) -> set[Path]:
    return {
        p.relative_to(root)
        for p in (root / "texera").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def stale_files() -> list[str]:
    """Names the committed generated files that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh_root = Path(scratch)
        generate(fresh_root)
        fresh, committed = generated_files(fresh_root), generated_files(ROOT)
        differing = {
            p for p in fresh & committed if not filecmp.cmp(fresh_root / p, ROOT / p, shallow=False)
        }
        return sorted(str(p) for p in (fresh ^ committed) | differing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale generated files")
    if parser.parse_args().check:
        stale = stale_files()
        if stale:
            print("generated code is stale; run `make gen`:", *stale, sep="\n  ")
            sys.exit(1)
        print("generated code is up to date")
    else:
        generate(ROOT)


if __name__ == "__main__":
    main()
