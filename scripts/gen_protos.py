"""Generates the Python code of the texera.lake.v1 API from protos/.

Writes messages (`*_pb2.py`), gRPC stubs (`*_pb2_grpc.py`), their typed
stubs (`*.pyi`, from mypy-protobuf) and the API's descriptor set with its
comments and imports (`api_descriptor_set.binpb`, which server reflection
serves) into texera/lake/v1/. With --check it
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
PACKAGE_DIR = Path("texera", "lake", "v1")


def generate(out_root: Path) -> None:
    """Runs protoc over every .proto of the package into out_root."""
    proto_files = sorted(
        str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto")
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
        f"--descriptor_set_out={out_root / PACKAGE_DIR / 'api_descriptor_set.binpb'}",
        "--include_source_info",
        "--include_imports",
        *proto_files,
    ]
    # A child process, so that the plugins' chatter on stderr shows only on failure.
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"protoc failed:\n{result.stderr}")
    for package in (Path("texera"), Path("texera", "lake"), PACKAGE_DIR):
        init = out_root / package / "__init__.py"
        init.write_text('"""Generated from protos/ by scripts/gen_protos.py; do not edit."""\n')
    (out_root / PACKAGE_DIR / "py.typed").write_text("")


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
