"""`python -m flows.eval --config ...` (what older instructions and scripts say) would define the flow and exit
0 having done nothing. Each of evalflow's packages calls `refuse_module_run` when it is imported: started that
way, the process says in one line which command to run instead and exits 2."""

from __future__ import annotations

import sys

from errors import USAGE_ERROR

# what to run instead of a module that is not a command (by the module's name; anything else: the command list)
INSTEAD = {
    "flows.eval": "evalflow run --config FILE",
    "flows.watch": "evalflow watch",
    "flows.sweep": "evalflow sweep",
    "flows.rescore": "evalflow rescore RUN_ID",
    "flows.compare": "evalflow compare RUN_ID",
    "flows.shards": "evalflow run --config FILE (with collection.shards)",
    "ops.local": "evalflow local",
}


def module_run_target(argv: list[str]) -> str | None:
    """The module of `python [options] -m MODULE ...` in `argv` (the interpreter's own), else None."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None)
        if arg.startswith("-m"):
            return arg[2:]
        if arg in ("-X", "-W"):  # options whose value is the next argument
            next(args, None)
        elif arg.startswith("-c") or not arg.startswith("-"):
            return None  # a command or a script path: what follows are its own arguments
    return None


def refuse_module_run(package: str) -> None:
    """Exit 2 with one line when this process runs `python -m PACKAGE[.MODULE]`: only `python -m cli` is a
    command among evalflow's packages."""
    target = module_run_target(list(getattr(sys, "orig_argv", ())))
    if target is None or (target != package and not target.startswith(package + ".")):
        return
    instead = INSTEAD.get(target, "evalflow --help")
    print(f"usage error: {target} is not a command; run `{instead}` (or `python -m cli ...` without the installed "
          "command)", file=sys.stderr)  # fmt: skip
    raise SystemExit(USAGE_ERROR)
