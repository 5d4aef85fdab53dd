#!/usr/bin/env python3
"""The plugin's start in instructions, not milliseconds: a figure the shared machine's load
does not move (issue 34: launch -> synchronized).

Each tree's plugin is launched as ``benchmarks/footprint.py`` launches it (the console
script's code, against the fake runtime on a fresh socket, Configure then a Synchronize of N
containers) under valgrind's callgrind with ``--dump-before=send``: a profile part is cut
before each ``send`` the plugin makes, and its first three are the start up to the early
RegisterPlugin, up to the Configure answer (the config, logging, asyncio, the NRI schema, the
transport) and up to the Synchronize answer (the build: managers, topology, checkpoints; then
the Synchronize itself). Prints the instructions (Ir, millions) the process executed in user
space up to each answer; kernel time (page faults, system calls) is not in them. One launch
per tree and size gives the same counts to within a fraction of a percent; on this project's
2-CPU VM a million instructions of the start take ~0.2 ms on a CPU when the machine is quiet.

``--compare TREE`` (repeatable) adds the ``nri_cpumgr`` of another tree, as footprint.py's
option does (``git archive REV nri_cpumgr | tar -x -C TREE``). Needs ``valgrind`` (Debian's
package). Asserts nothing.

    .venv/bin/python benchmarks/start_instructions.py [--sizes 0 1000] [--compare TREE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

import benchmarks.footprint as fp  # noqa: E402

PARTS = ("registered", "configured", "synchronized")


def counts(work: Path) -> list[int]:
    """Ir of the callgrind parts 1.. in ``work`` (``cg.out.1``, ``cg.out.2``, ...)."""
    out = []
    for i in range(1, len(PARTS) + 1):
        f = work / f"cg.out.{i}"
        if not f.is_file():
            break
        for line in f.read_text().splitlines():
            if line.startswith("summary:"):
                out.append(int(line.split()[1]))
                break
    return out


async def measure(name: str, tree: Path | None, n: int, cfg: Path, env: dict[str, str],
                  valgrind: str) -> list[int]:
    code = [sys.executable, "-c", fp.BOOT]
    sub_env = dict(env)
    if tree is not None:
        sub_env["PYTHONPATH"] = str(tree)
    kept: list[Path] = []
    argv = [valgrind, "--tool=callgrind", "--dump-before=send", "-q",
            "--callgrind-out-file={work}/cg.out", *code, "run", "--config", str(cfg),
            "--socket", "{socket}", "--state-dir", "{work}/state"]
    subject = fp.Subject(name, argv, sub_env)
    try:
        await fp.launch(subject, n, 0.2, keep=False, keep_work=kept)
        return counts(kept[0])
    finally:
        for w in kept:
            shutil.rmtree(w, ignore_errors=True)


async def main_async(args: argparse.Namespace) -> int:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("no valgrind on PATH (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ir-cfg-", dir="/tmp"))
    try:
        cfg = tmp / "config.yaml"
        cfg.write_text(fp.CONFIG)
        env = dict(os.environ)
        env.pop("NRI_PLUGIN_SOCKET", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        trees: list[tuple[str, Path | None]] = [("nri-cpumgr", HERE.parent)]
        trees += [(f"nri-cpumgr@{t}", Path(t)) for t in args.compare]
        for name, tree in trees:  # warm-up: the bytecode of each tree
            await measure(name, tree, 0, cfg, env, valgrind)
        print("start_instructions: instructions (Ir, millions) up to each answer; config: "
              + fp.CONFIG.strip().replace("\n", ", ")
              + f"; runtime {fp.RUNTIME_NAME} {fp.RUNTIME_VERSION}")
        for n in args.sizes:
            for name, tree in trees:
                ir = await measure(name, tree, n, cfg, env, valgrind)
                total = 0
                cells = []
                for part, value in zip(PARTS, ir, strict=False):
                    total += value
                    cells.append(f"{part} {total / 1e6:6.1f}")
                print(f"  {name:<40} {n:>5} containers: " + "   ".join(cells))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[0, 1000],
                    help="containers in the Synchronize (one launch each)")
    ap.add_argument("--compare", action="append", default=[], metavar="TREE",
                    help="also measure the nri_cpumgr of TREE (a checkout or an export)")
    args = ap.parse_args()
    args.compare = [str(Path(t).resolve()) for t in args.compare]
    os.chdir(tempfile.gettempdir())  # (a `-c` launch puts its working directory on sys.path)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
