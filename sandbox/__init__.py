"""Running untrusted (model-written) Python: the code sandbox, and the judge harness that runs inside it.

Entry points, in `sandbox.runner`: `run_tests(program, TestSpec(...))` is the verifier (the tests run in a
judge process against the program), `run_python(code)` runs a program and reports its exit status (not a
verifier); both return a `SandboxResult` and raise `SandboxUnavailable` where no sandbox can be set up
(unless `allow_unsandboxed=True`); `sandbox_problem()` says why not, `backend()` which sandbox is built.

Security model: every run gets fresh namespaces (no network), a private tmpfs root, throwaway uids (or user
namespaces) and a cgroup; the tests stay in a judge process the program reaches only by plain-data RPC.

Modules: `runner` (the entry points, the backend, the outcome), `launch` (the parent's side of a run), `pid1`
(the sandbox's PID 1), `cgroup`, `userns` (the backend without root), `unsandboxed` (the explicit escape
hatch), and `harness_codec`, `harness_judge`, `harness_runner` (a judged run's wire format, its judge and its
program side). The package imports nothing of evalflow but `errors`. PID 1 and the harness run inside the
sandbox under `python -I -S`, standard library only; the harness is copied there as `sandbox/harness_*.py`
beside an empty `sandbox/__init__.py`, so this file imports nothing.
"""

from errors.module_run import refuse_module_run

refuse_module_run(__name__)  # `python -m sandbox.X` runs nothing: say what to run instead
