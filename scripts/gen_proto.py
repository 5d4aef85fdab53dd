#!/usr/bin/env python3
"""Generate the Python protobuf modules (``*_pb2.py`` + ``*_pb2.pyi``) from ``proto/``.

Usage: ``python scripts/gen_proto.py`` writes into ``nri_cpumgr/api/``;
``python scripts/gen_proto.py --check`` generates into a temporary directory and exits 1,
listing the stale or missing files, if the committed output differs.

The generator is ``python -m grpc_tools.protoc`` (grpcio-tools); its output has no
timestamps, so the same tool version gives byte-identical files. Imports between our own
generated modules are rewritten to the absolute ``nri_cpumgr.api`` package, and the
protobuf runtime modules the ``.py`` files import to ``nri_cpumgr.api._protobuf`` (the same
calls without protobuf's pure-Python implementation on the upb runtime; issue 34).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
PROTO_DIR = TOP / "proto"
OUT_DIR = TOP / "nri_cpumgr" / "api"
PACKAGE = "nri_cpumgr.api"


def _protos() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def _fix_imports(text: str, modules: set[str]) -> str:
    """Rewrite ``import foo_pb2 as ...`` for our own modules to the package path."""

    def repl(m: re.Match[str]) -> str:
        mod = m.group(1)
        if mod in modules:
            return f"from {PACKAGE} import {mod} as"
        return m.group(0)

    text = re.sub(r"^import (\w+_pb2) as", repl, text, flags=re.M)
    # .pyi stubs use "import foo_pb2 as _foo_pb2" as well as "from foo_pb2 import ..."
    return re.sub(
        r"^from (\w+_pb2) import",
        lambda m: f"from {PACKAGE}.{m.group(1)} import" if m.group(1) in modules else m.group(0),
        text,
        flags=re.M,
    )


#: generated code's imports of protobuf's runtime -> the same names from our module
_RUNTIME_IMPORTS = {
    f"from google.protobuf import {m} as _{m}\n":
        f"from {PACKAGE}._protobuf import {m} as _{m}\n"
    for m in ("descriptor", "descriptor_pool", "runtime_version", "symbol_database")
} | {"from google.protobuf.internal import builder as _builder\n":
     f"from {PACKAGE}._protobuf import builder as _builder\n"}


def _runtime_imports(text: str) -> str:
    """Point the generated ``.py`` code's protobuf runtime imports at
    ``nri_cpumgr.api._protobuf``; raises SystemExit when the generator's output no longer
    has them as expected."""
    for old, new in _RUNTIME_IMPORTS.items():
        if old not in text:
            raise SystemExit(f"gen_proto: generated code without {old.strip()!r}")
        text = text.replace(old, new)
    return text


def generate(out: Path) -> list[Path]:
    """Run protoc for every ``proto/*.proto`` into ``out``; return the files written.

    Raises subprocess.CalledProcessError if protoc fails.
    """
    protos = _protos()
    if not protos:
        raise SystemExit(f"no .proto files in {PROTO_DIR}")
    cmd = [
        sys.executable, "-m", "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        *[p.name for p in protos],
    ]
    subprocess.run(cmd, check=True, cwd=PROTO_DIR)
    modules = {p.stem + "_pb2" for p in protos}
    written = []
    for mod in sorted(modules):
        for suffix in (".py", ".pyi"):
            f = out / (mod + suffix)
            text = _fix_imports(f.read_text(), modules)
            f.write_text(_runtime_imports(text) if suffix == ".py" else text)
            written.append(f)
    return written


def check() -> int:
    """Compare freshly generated files with ``nri_cpumgr/api``; return the exit status."""
    with tempfile.TemporaryDirectory(prefix="gen_proto-") as tmp:
        fresh = generate(Path(tmp))
        stale = []
        for f in fresh:
            committed = OUT_DIR / f.name
            if not committed.exists() or committed.read_bytes() != f.read_bytes():
                stale.append(str(committed.relative_to(TOP)))
    if stale:
        print("stale generated files (run `make proto`):", *stale, sep="\n  ")
        return 1
    print("generated protobuf modules are up to date")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only verify, exit 1 if stale")
    args = ap.parse_args(argv)
    if args.check:
        return check()
    for f in generate(OUT_DIR):
        print("wrote", f.relative_to(TOP))
    return 0


if __name__ == "__main__":
    sys.exit(main())
