"""``devbench gpu-run``'s options: what it accepts, its examples, and what is wrong with a call's options."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from devbench.engine import sweep

#: gpu-run's asv stages send every point of a swept class, the CPU's too, to the stage's measuring process unless
#: ``DEVBENCH_SWEEP`` says otherwise: on the CPU that path gave compare no false verdict and called a planted 2x in
#: every product (reports/gpu/sweep-on-cpu), and a CPU point whose figures count one set of samples
#: (``spec.SAME_BLOCKS``) takes them once, not once per figure's process
SWEEP = "all"

EXAMPLES = """examples:
  devbench gpu-run --plan-only                      # the plan for this machine, nothing run
  devbench gpu-run --machine h100 --out $OUT        # the lent GPU machine's one call
  devbench gpu-run --gpu-only --budget-s 580        # every point that needs a GPU, the CPU's left out
  devbench gpu-run --budget-s 1800 --rounds 2       # a rented box with time: the full grid, asv's rounds
  devbench gpu-run --bench 'Matmul' --budget-s 120  # one family
  devbench gpu-run --plan-only --costs-from reports/gpu/h200/plan.json --gpus 8 --cores 96 --budget-s 600
                                                    # an 8-GPU node at the H200's costs: what each stage runs
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--machine", default=os.uname().nodename,
                   help="asv machine name, recorded with its GPU fields (default: this host's name)")  # fmt: skip
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="seconds for everything, the packing included (default: %(default)s: 8 minutes)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1,
                   help="asv rounds of each point (asv run -a rounds=R; a figure read from its class's set-up cache, "
                        "the NCCL worlds' and the peer matrix's, runs one) (default: %(default)s)")  # fmt: skip
    p.add_argument("--bench", help="regular expression over asv's name(params): run only these")
    p.add_argument("--gpu-only", action="store_true",
                   help="run only the points that need a GPU (a 'cuda' or 'nccl' param, or a class that declares "
                        "GPUs: host<->device copies, GPU over CPU, streams); with --bench, those it selects")
    p.add_argument("--out", default=".asv/gpu-run", help="where the packed run goes (default: %(default)s)")
    p.add_argument("--python", default=sys.executable, help="the Python whose torch the suite runs with")
    p.add_argument("--repo", default=".", help="the repository (a git checkout with asv.conf.json)")
    p.add_argument("--plan-only", action="store_true", help="print and write the plan, run nothing")
    p.add_argument("--costs-from", metavar="PLAN_JSON",
                   help="price the plan with another machine's recorded costs (its gpu-run plan.json) instead of "
                        "probing this one; with --plan-only, to try a plan for a GPU on the CPU")  # fmt: skip
    p.add_argument("--precision-from", metavar="RESULTS",
                   help="with --costs-from: that machine's asv results folder (e.g. reports/asv-results/h200); a "
                        "figure it holds wider than 0.5%% is priced at its class's cap, not at the fewest blocks")
    p.add_argument("--gpus", type=int, metavar="N",
                   help="with --costs-from: plan for a machine of N GPUs at those costs (e.g. 8, for an 8-GPU node "
                        "no one has lent yet: what each stage would run and cost)")  # fmt: skip
    p.add_argument("--cores", type=int, metavar="N", help="with --gpus: that machine's CPU cores")
    p.add_argument("--no-tests", dest="tests", action="store_false", help="leave out the tests that need CUDA")
    p.add_argument("--no-validate", dest="validate", action="store_false", help="leave out devbench validate")


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with gpu-run's options, in a sentence that names the option; None if nothing."""
    try:
        sweep.mode(SWEEP)
    except ValueError as exc:
        return str(exc)
    if not 0 < args.budget_s < float("inf"):
        return f"--budget-s must be a number of seconds > 0, got {args.budget_s}"
    if args.rounds < 1:
        return f"--rounds must be >= 1, got {args.rounds}"
    if args.bench:
        try:
            re.compile(args.bench)
        except re.error as exc:
            return f"--bench {args.bench!r} is not a regular expression: {exc}"
    if not (Path(args.repo) / "asv.conf.json").is_file():
        from devbench.records.files import project_above

        above = project_above(Path(args.repo))
        hint = f" (the project is {above}: run there)" if above else ""
        return f"--repo {args.repo}: no asv.conf.json there{hint}"
    try:  # asv reads the commit and its date from git
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=args.repo, capture_output=True, text=True).returncode
    except OSError as exc:
        return f"--repo {args.repo}: git could not be run there ({exc.strerror}); asv reads the commit from git"
    if head != 0:
        return f"--repo {args.repo}: not a git checkout with a commit (asv reads the commit from git)"
    if args.costs_from and not args.plan_only:
        return "--costs-from prices a plan for another machine: use it with --plan-only"
    if (args.gpus is not None or args.cores is not None) and not args.costs_from:
        return "--gpus and --cores describe another machine: use them with --costs-from and --plan-only"
    if args.gpus is not None and args.gpus < 0:
        return f"--gpus must be >= 0, got {args.gpus}"
    if args.cores is not None and args.cores < 1:
        return f"--cores must be >= 1, got {args.cores}"
    if args.costs_from and not Path(args.costs_from).is_file():
        return f"--costs-from {args.costs_from}: no such file"
    if args.costs_from:
        from devbench.gpu.costs import costs_from

        try:
            costs_from(Path(args.costs_from))
        except (OSError, ValueError) as exc:  # its message names the option and the file
            return str(exc)
    out = Path(args.out)
    if out.exists() and not out.is_dir() or any(p.exists() and not p.is_dir() for p in out.parents):
        return f"--out {args.out}: a file is in the way, not a folder"
    if args.plan_only and _ran_in(out / "plan.json"):
        return (f"--out {args.out} holds a run's plan.json (its stages, beside its results): --plan-only would "
                "replace it; choose another --out")
    if args.precision_from and not args.costs_from:
        return "--precision-from reads the results of the machine --costs-from prices: use them together"
    if args.precision_from and not Path(args.precision_from).is_dir():
        return f"--precision-from {args.precision_from}: no such folder"
    if not Path(args.python).exists():
        return f"--python {args.python} does not exist"
    if not re.fullmatch(r"[A-Za-z0-9._-]+", args.machine):
        return f"--machine {args.machine!r}: use letters, digits, '.', '_' and '-'"
    return None


def _ran_in(plan: Path) -> bool:
    """Whether ``plan`` is the plan.json of a run that ran stages (not one ``--plan-only`` wrote)."""
    import json

    try:
        return bool(json.loads(plan.read_text()).get("stages"))
    except (OSError, ValueError, AttributeError):
        return False
