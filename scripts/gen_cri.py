#!/usr/bin/env python3
"""Generate Python stubs for the Kubernetes CRI (runtime.v1) used by the end-to-end tests.

Source: the upstream ``k8s.io/cri-api/pkg/apis/runtime/v1/api.proto`` shipped by Debian's
``golang-github-kubernetes-cri-api-dev`` (fetched by ``scripts/fetch-runtime.sh`` into
``.runtime/schema/cri``). Its gogo.proto import and ``(gogoproto.*)`` options are dropped (they
only steer Go code generation), the result is compiled with ``grpc_tools.protoc`` into
``tests/e2e/_cri/`` as ``cri_api_pb2.py`` / ``cri_api_pb2_grpc.py`` (package-relative import).

Idempotent: a stamp file records the SHA-256 of the source schema, of this script and the
grpcio-tools version; nothing is regenerated while it matches. Usage::

    python3 scripts/gen_cri.py [--proto FILE] [--out DIR] [--force]

Importable too: ``ensure_cri_stubs()`` returns the output directory (raises FileNotFoundError
when the schema is missing, RuntimeError when protoc fails).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
RUNTIME_DIR = Path(os.environ.get("NRI_CPUMGR_RUNTIME", TOP / ".runtime"))
DEFAULT_PROTO = (
    RUNTIME_DIR
    / "schema/cri/usr/share/gocode/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"
)
DEFAULT_OUT = TOP / "tests/e2e/_cri"
MODULE = "cri_api"  # generated modules: cri_api_pb2, cri_api_pb2_grpc
STAMP = ".stamp"


def strip_gogo(text: str) -> str:
    """Return the schema text without the gogo.proto import and any ``(gogoproto.x)`` option.

    File-level options (``option (gogoproto.x) = v;``) are removed as lines; field options such
    as ``[(gogoproto.nullable) = false]`` are removed from the field declaration.
    """
    out: list[str] = []
    for line in text.splitlines():
        if re.match(r'\s*import\s+"github\.com/gogo/protobuf/gogoproto/gogo\.proto"', line):
            continue
        if re.match(r"\s*option\s+\(gogoproto\.", line):
            continue
        # field options: drop (gogoproto.*) entries, then an empty [] left behind
        line = re.sub(r"\(gogoproto\.[A-Za-z_]+\)\s*=\s*[^,\]]+,?\s*", "", line)
        line = re.sub(r"\s*\[\s*\]", "", line)
        out.append(line)
    return "\n".join(out) + "\n"


def _fingerprint(proto: Path) -> str:
    import grpc_tools

    h = hashlib.sha256()
    h.update(proto.read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(getattr(grpc_tools, "__version__", "").encode())
    try:
        from importlib.metadata import version

        h.update(version("grpcio-tools").encode())
    except Exception:  # noqa: BLE001 - the version only refines the stamp
        pass
    return h.hexdigest()


def stubs_current(proto: Path = DEFAULT_PROTO, out: Path = DEFAULT_OUT) -> bool:
    """True when ``out`` holds stubs generated from ``proto`` by this script version."""
    stamp = out / STAMP
    if not stamp.is_file() or not proto.is_file():
        return False
    if not (out / f"{MODULE}_pb2.py").is_file() or not (out / f"{MODULE}_pb2_grpc.py").is_file():
        return False
    return stamp.read_text().strip() == _fingerprint(proto)


def ensure_cri_stubs(
    proto: Path = DEFAULT_PROTO, out: Path = DEFAULT_OUT, force: bool = False
) -> Path:
    """Generate the CRI stubs into ``out`` unless they are current; return ``out``.

    Safe to call concurrently (an flock on ``out/.lock`` serialises generators; files are
    replaced atomically). Raises FileNotFoundError if ``proto`` is missing, RuntimeError if
    protoc fails.
    """
    proto = Path(proto)
    out = Path(out)
    if not proto.is_file():
        raise FileNotFoundError(f"CRI schema not found: {proto} (run scripts/fetch-runtime.sh)")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and stubs_current(proto, out):
            return out
        from grpc_tools import protoc

        with tempfile.TemporaryDirectory(prefix="gen-cri-") as tmp:
            src = Path(tmp) / "src"
            dst = Path(tmp) / "dst"
            src.mkdir()
            dst.mkdir()
            (src / f"{MODULE}.proto").write_text(strip_gogo(proto.read_text()))
            include = Path(protoc.__file__).resolve().parent / "_proto"
            rc = protoc.main(
                [
                    "grpc_tools.protoc",
                    f"-I{src}",
                    f"-I{include}",
                    f"--python_out={dst}",
                    f"--pyi_out={dst}",
                    f"--grpc_python_out={dst}",
                    str(src / f"{MODULE}.proto"),
                ]
            )
            if rc != 0:
                raise RuntimeError(f"grpc_tools.protoc failed with exit code {rc}")
            grpc_file = dst / f"{MODULE}_pb2_grpc.py"
            text = grpc_file.read_text()
            text = text.replace(
                f"import {MODULE}_pb2 as", f"from . import {MODULE}_pb2 as"
            )
            grpc_file.write_text(text)
            (dst / "__init__.py").write_text(
                '"""Generated by scripts/gen_cri.py from the CRI api.proto; do not edit."""\n'
            )
            for f in dst.iterdir():
                tmpname = out / f".{f.name}.tmp"
                shutil.copyfile(f, tmpname)
                os.replace(tmpname, out / f.name)
        (out / STAMP).write_text(_fingerprint(proto) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proto", type=Path, default=DEFAULT_PROTO)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--force", action="store_true", help="regenerate even if current")
    args = ap.parse_args(argv)
    try:
        out = ensure_cri_stubs(args.proto, args.out, args.force)
    except (FileNotFoundError, RuntimeError) as e:
        print(f"gen_cri: {e}", file=sys.stderr)
        return 1
    print(f"CRI stubs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
