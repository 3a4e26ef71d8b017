"""Generate the gRPC stubs in src/spindle/_proto from the node's crates/server/proto/spindle.proto.

    python tools/generate_proto.py            # rewrite the checked-in stubs
    python tools/generate_proto.py --out DIR  # write them under DIR instead (the drift test)

Needs the pinned grpcio-tools and mypy-protobuf of requirements-dev.txt: their output is
what is checked in, and tests/test_proto_stubs.py fails when a fresh generation differs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PROTO = HERE.parent.parent / "crates" / "server" / "proto" / "spindle.proto"
PACKAGE = Path("spindle") / "_proto"
GENERATED = ("spindle_pb2.py", "spindle_pb2.pyi", "spindle_pb2_grpc.py", "spindle_pb2_grpc.pyi")


def generate(out: Path) -> list[Path]:
    """Write the generated modules into `out` (a `spindle/_proto` folder); answer their paths."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / PACKAGE).mkdir(parents=True)
        shutil.copyfile(PROTO, root / PACKAGE / "spindle.proto")
        # protoc finds the mypy plugins (protoc-gen-mypy, protoc-gen-mypy_grpc) on PATH.
        bin_dir = str(Path(sys.executable).parent)
        env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                "-I.",
                "--python_out=.",
                "--grpc_python_out=.",
                "--mypy_out=.",
                "--mypy_grpc_out=.",
                str(PACKAGE / "spindle.proto"),
            ],
            cwd=root,
            env=env,
            check=True,
        )
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in GENERATED:
            shutil.copyfile(root / PACKAGE / name, out / name)
            written.append(out / name)
        return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "src" / PACKAGE)
    args = parser.parse_args()
    for path in generate(args.out):
        print(path)


if __name__ == "__main__":
    main()
