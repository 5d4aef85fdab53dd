"""``nri-cpumgr explain POD[/CONTAINER]``: why the running plugin gave a container its CPUs
(or refuses it), from the records in its state directory (``<stateDirectory>/explanations``,
written with the checkpoint when ``explainDecisions: true`` or at debug level)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def cmd_explain(args: argparse.Namespace) -> int:
    from nri_cpumgr.explain.explainer import EXPLANATIONS_NAME, find, render
    from nri_cpumgr.locations import load_state_file, state_dir_of

    state_dir = state_dir_of(args)
    body = load_state_file(state_dir, EXPLANATIONS_NAME, "nri-cpumgr explain",
                           f"no explanations in {state_dir}: the plugin records them with "
                           "`explainDecisions: true` in its config (or when run with -v)")
    if body is None:
        return 1
    from nri_cpumgr.explain.shape import explanations_problem

    why = explanations_problem(body)
    if why is not None:
        print(f"nri-cpumgr explain: checkpoint {state_dir / EXPLANATIONS_NAME}: malformed: "
              f"{why}", file=sys.stderr)
        return 1
    parts = args.target.split("/")
    if len(parts) >= 3:  # namespace/name/container
        found = find(body, "/".join(parts[:2]), "/".join(parts[2:]))
    elif len(parts) == 2:  # namespace/name, else name/container
        found = find(body, args.target, None) or find(body, parts[0], parts[1])
    else:
        found = find(body, args.target, None)
    if not found:
        print(f"nri-cpumgr explain: no record for {args.target} (records are kept for live "
              "containers and the last refusals)", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    for r in found:
        print(f"{r['pod']} {r['container']} ({r.get('containerID', '')[:13]})")
        for line in render(r):
            print(f"  {line}")
    return 0


def add_parser(sub: Any) -> None:
    """The ``explain`` sub-command (called by nri_cpumgr.cli.build_parser)."""
    from nri_cpumgr.locations import DEFAULT_CONFIG

    e = sub.add_parser("explain", help="why a container got its CPUs (or is refused)")
    e.add_argument("target", metavar="POD[/CONTAINER]",
                   help="pod as NAMESPACE/NAME, NAME or uid, optionally /CONTAINER")
    e.add_argument("--config", help="the plugin's config file, read for its stateDirectory "
                   f"(default: {DEFAULT_CONFIG} if present, else the built-in defaults)")
    e.add_argument("--state-dir", help="the plugin's state directory (overrides the config)")
    e.add_argument("--json", action="store_true", help="print the records as JSON")
    e.set_defaults(func=cmd_explain)
