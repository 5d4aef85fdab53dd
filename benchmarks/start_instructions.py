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

``--pod-spec-pods N``: the config watches a loopback fake API server holding N pods of the
node (``podSpecSource: apiServer``, as footprint.py's option). The watch thread's
instructions are counted with the main thread's (callgrind runs one thread at a time) and
its HTTP requests cut parts too: the parts of the requests the server received before the
runtime had an answer are added to that answer's figure (under valgrind a request and an
answer are milliseconds apart). This shows the watch's CPU, not whether its LIST overlaps
the start (footprint.py's wall clock does).

``--restart``: each measured launch is a restart: a launch before it (without valgrind, the
same containers) leaves its checkpoint in the state directory, which the measured one reads
and restores, as after a DaemonSet rollout or a crash (footprint.py's option).

``--python PYTHON``: the plugin's interpreter, by default the image's as in footprint.py
(Debian's ``python3`` from ``make image-venv``, whose start executes ~15 % fewer instructions
than the developers' pyenv build). ``--compare TREE`` (repeatable) adds the ``nri_cpumgr`` of
another tree, as footprint.py's option does (``git archive REV nri_cpumgr | tar -x -C
TREE``). Needs ``valgrind`` (Debian's package). Asserts nothing.

    .venv/bin/python benchmarks/start_instructions.py [--sizes 0 1000] [--pod-spec-pods N]
        [--restart] [--compare TREE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

import benchmarks.footprint as fp  # noqa: E402
from benchmarks.report import find_valgrind  # noqa: E402

PARTS = ("registered", "configured", "synchronized")


def part_counts(work: Path) -> list[int]:
    """Ir of the callgrind parts 1.. in ``work`` (``cg.out.1``, ``cg.out.2``, ...)."""
    out = []
    i = 1
    while (f := work / f"cg.out.{i}").is_file():
        for line in f.read_text().splitlines():
            if line.startswith("summary:"):
                out.append(int(line.split()[1]))
                break
        i += 1
    return out


def totals(parts: list[int], marks: dict[str, float], requests: list[float]) -> list[int]:
    """Ir up to each of :data:`PARTS`: the parts up to the plugin's k-th NRI answer, plus
    one part per request the fake API server received before the runtime had that answer
    (the watch thread's ``send``: callgrind cuts a part there too, and counts that
    thread's instructions in the parts with the main thread's)."""
    out = []
    for k, name in enumerate(PARTS, 1):
        if name not in marks:
            break
        k += sum(1 for t in requests if t < marks[name])
        if k > len(parts):
            break
        out.append(sum(parts[:k]))
    return out


async def measure(name: str, tree: Path | None, n: int, cfg: Path, env: dict[str, str],
                  valgrind: str, requests: list[float], state: Path | None = None,
                  python: str = sys.executable) -> list[int]:
    """Ir up to each of :data:`PARTS` of one launch with a Synchronize of ``n``; ``state``:
    the state directory to use, a launch without valgrind first leaving its checkpoint there
    (a restart), else a fresh one (a first start)."""
    code = [python, "-c", fp.BOOT]
    sub_env = dict(env)
    if tree is not None:
        sub_env["PYTHONPATH"] = str(tree)
    kept: list[Path] = []
    state_arg = "{work}/state" if state is None else str(state)
    run = [*code, "run", "--config", str(cfg), "--socket", "{socket}", "--state-dir", state_arg]
    if state is not None:  # (the previous run: its checkpoint, written after its answers)
        shutil.rmtree(state, ignore_errors=True)
        await fp.launch(fp.Subject(name, run, sub_env), n, 0.5, keep=False)
    argv = [valgrind, "--tool=callgrind", "--dump-before=send", "-q",
            "--callgrind-out-file={work}/cg.out", *run]
    subject = fp.Subject(name, argv, sub_env)
    marks: dict[str, float] = {}
    requests.clear()
    try:
        await fp.launch(subject, n, 0.2, keep=False, keep_work=kept, marks=marks)
        return totals(part_counts(kept[0]), marks, requests)
    finally:
        for w in kept:
            shutil.rmtree(w, ignore_errors=True)


async def main_async(args: argparse.Namespace) -> int:
    valgrind = find_valgrind()
    if valgrind is None:
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ir-cfg-", dir="/tmp"))
    api = None
    try:
        cfg = tmp / "config.yaml"
        config = fp.CONFIG
        requests: list[float] = []  # when the fake API server got each request
        if args.pod_spec_pods:
            api, extra = fp.fake_api_server(args.pod_spec_pods)
            config += extra
            serve = api._serve

            def counted(h: object) -> None:
                requests.append(time.perf_counter())
                serve(h)

            api._serve = counted
        cfg.write_text(config)
        env = dict(os.environ)
        env.pop("NRI_PLUGIN_SOCKET", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        trees: list[tuple[str, Path | None]] = [("nri-cpumgr", HERE.parent)]
        trees += [(f"nri-cpumgr@{t}", Path(t)) for t in args.compare]
        for name, tree in trees:  # warm-up: the bytecode of each tree
            await measure(name, tree, 0, cfg, env, valgrind, requests, python=args.python)
        print("start_instructions: instructions (Ir, millions) up to each answer"
              + (" of a restart (the checkpoint of a previous launch with as many "
                 "containers)" if args.restart else "") + "; config: "
              + config.strip().replace("\n", ", ")
              + f"; runtime {fp.RUNTIME_NAME} {fp.RUNTIME_VERSION}; the plugin on "
              + f"{args.python} ({fp.describe_python(args.python)})")
        for n in args.sizes:
            for name, tree in trees:
                state = tmp / "state" if args.restart else None
                ir = await measure(name, tree, n, cfg, env, valgrind, requests, state,
                                   args.python)
                cells = [f"{part} {value / 1e6:6.1f}"
                         for part, value in zip(PARTS, ir, strict=False)]
                print(f"  {name:<40} {n:>5} containers: " + "   ".join(cells))
    finally:
        if api is not None:
            api.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[0, 1000],
                    help="containers in the Synchronize (one launch each)")
    ap.add_argument("--compare", action="append", default=[], metavar="TREE",
                    help="also measure the nri_cpumgr of TREE (a checkout or an export)")
    ap.add_argument("--pod-spec-pods", type=int, default=0, metavar="N",
                    help="watch a fake API server holding N pods (podSpecSource apiServer)")
    ap.add_argument("--restart", action="store_true",
                    help="each measured launch finds the checkpoint of a launch before it "
                         "with the same containers (a DaemonSet rollout, a crash)")
    ap.add_argument("--python", metavar="PYTHON",
                    help="the plugin's interpreter, as footprint.py's option (default: the "
                         "image's, .runtime/image-venv/bin/python from `make image-venv`, "
                         "when it exists, else this interpreter)")
    args = ap.parse_args()
    args.compare = [str(Path(t).resolve()) for t in args.compare]
    if args.python is None:
        args.python = str(fp.IMAGE_PYTHON) if fp.IMAGE_PYTHON.is_file() else sys.executable
    args.python = fp.interpreter_path(args.python)
    os.chdir(tempfile.gettempdir())  # (a `-c` launch puts its working directory on sys.path)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
