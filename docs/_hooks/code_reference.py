"""The reference of what the code declares elsewhere: the built-in environments and task kinds (their registries),
the error kinds and every `EvalflowError` subclass (found in the source), the commands' own error prefixes, the
performance benchmarks under bench/, and the deployments in prefect.yaml."""

from __future__ import annotations

import ast
import functools

from docs._hooks.markdown_text import REPO_ROOT, cell, table

# the packages whose modules may define EvalflowError subclasses (scanned as source: nothing is imported)
ERROR_PACKAGES = ("errors", "core", "envs", "sandbox", "tasks", "flows", "blocks", "cli", "ops", "evalflow")


def _builtin(origin: str) -> bool:
    return origin.startswith("evalflow (")


def env_options_markdown() -> str:
    """The built-in environments: version, kind, options with their defaults, metrics (linked)."""
    from envs.catalog import describe

    found, _broken = describe()
    rows = [[f"`{s.name}`", s.version, s.kind,
             cell(", ".join(f"`{k}={v}`" for k, v in s.options.items()) or "none"),
             cell(", ".join(f"`{m}`" for m in s.metrics))]
            for s in found if _builtin(s.origin)]  # fmt: skip
    return table(["name", "version", "kind", "options (defaults)", "metrics"], rows) + "\n"


def env_metrics_markdown() -> str:
    """Per built-in environment, the metrics it declares (`metrics`: `evalflow.MetricSpec`)."""
    from envs.catalog import describe
    from envs.registry import metric_specs

    names = [s.name for s in describe()[0] if _builtin(s.origin)]
    parts = []
    for name, specs in metric_specs(names).items():
        rows = [[f"`{m.key}`", m.kind, "yes" if m.headline else "", cell(m.description)] for m in specs]
        parts.append(f"**`{name}`**\n\n" + table(["key", "kind", "headline", "description"], rows) + "\n")
    return "\n".join(parts)


def task_kinds_markdown() -> str:
    """The extractor and scorer kinds a task file can name, with their options."""
    from envs.catalog import describe_kinds

    found, _broken = describe_kinds()
    rows = [[k.group, f"`{k.name}`", cell(k.summary),
             cell(", ".join(f"`{n}={v}`" for n, v in k.options.items()) or "none"), cell("; ".join(k.flags))]
            for k in found if _builtin(k.origin)]  # fmt: skip
    return table(["group", "kind", "what it does", "options (defaults)", "notes"], rows) + "\n"


# ---------------------------------------------------------------------------------------------- errors


@functools.cache
def error_classes() -> dict[str, list[tuple[str, str, str]]]:
    """Every `EvalflowError` subclass in the code, found in the source (nothing is imported), per kind: its
    name, its module's file and its docstring. A class without its own `kind` has its base's."""
    classes: dict[str, tuple[list[str], str | None, str, str]] = {}  # name -> bases, own kind, file, doc
    for package in ERROR_PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            source = path.read_text()
            if "class " not in source:
                continue
            for node in ast.parse(source).body:
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                         if isinstance(b, ast.Name | ast.Attribute)]  # fmt: skip
                kind = next((str(s.value.value) for s in node.body if isinstance(s, ast.Assign)
                             and any(isinstance(t, ast.Name) and t.id == "kind" for t in s.targets)
                             and isinstance(s.value, ast.Constant)), None)  # fmt: skip
                doc = " ".join((ast.get_docstring(node) or "").split())
                classes[node.name] = (bases, kind, str(path.relative_to(REPO_ROOT)), doc)

    def kind_of(name: str, seen: frozenset[str] = frozenset()) -> str | None:
        if name == "EvalflowError":
            return None
        bases, own, _file, _doc = classes[name]
        if own is not None:
            return own
        for base in bases:
            if base in classes and base not in seen and is_error(base, seen | {name}):
                return kind_of(base, seen | {name})
        return None

    def is_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "EvalflowError":
            return True
        if name not in classes or name in seen:
            return False
        return any(is_error(b, seen | {name}) for b in classes[name][0])

    by_kind: dict[str, list[tuple[str, str, str]]] = {}
    for name, (_bases, _own, file, doc) in sorted(classes.items()):
        if name != "EvalflowError" and is_error(name):
            kind = kind_of(name)
            if kind is None:
                raise ValueError(f"{file}: {name} is an EvalflowError without a kind")
            by_kind.setdefault(kind, []).append((name, file, doc))
    return by_kind


def error_kind_markdown(kind: str) -> str:
    """One kind: the line it prints, its exit status, and the classes of that kind with their docstrings."""
    from errors import EXIT_STATUS, HEADLINES, KINDS

    if kind not in KINDS:
        raise ValueError(f"unknown error kind {kind!r}; known: {', '.join(KINDS)}")
    classes = error_classes().get(kind, [])
    status = EXIT_STATUS[kind]
    what = "a usage error: the input cannot be used" if status == 2 else "the work failed"
    lines = [f"The line starts `{HEADLINES[kind]}: ` and the command exits with status **{status}** ({what}).\n",
             "Raised as:\n"]  # fmt: skip
    lines += [f"- `{name}` (`{file}`): {doc}" for name, file, doc in classes]
    return "\n".join(lines) + "\n"


def errors_overview() -> str:
    from errors import EXIT_STATUS, HEADLINES, KINDS

    rows = [[f"[`{HEADLINES[k]}: ...`](#{k})", str(EXIT_STATUS[k]), str(len(error_classes().get(k, [])))]
            for k in KINDS]  # fmt: skip
    return table(["the line starts", "exit status", "error classes"], rows) + "\n"


def command_prefixes() -> dict[str, list[str]]:
    """The prefixes a command gives an error that is not evalflow's own (`cli.common.fail(what, exc)`): each
    `what`, with the files that use it."""
    found: dict[str, list[str]] = {}
    for path in sorted((REPO_ROOT / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "fail" and node.args:
                first = node.args[0]
                for option in [first.body, first.orelse] if isinstance(first, ast.IfExp) else [first]:
                    if isinstance(option, ast.Constant):
                        files = found.setdefault(str(option.value), [])
                        if f"cli/{path.name}" not in files:
                            files.append(f"cli/{path.name}")
    return found


def command_prefixes_markdown() -> str:
    rows = [
        [f"`{what}: ...`", ", ".join(f"`{f}`" for f in files)] for what, files in sorted(command_prefixes().items())
    ]
    return table(["the line starts", "printed by"], rows) + "\n"


# ---------------------------------------------------------------------------------------------- benchmarks


def bench_markdown() -> str:
    """The performance benchmarks under bench/: each module with the first paragraph of its docstring."""
    rows: list[list[str]] = []
    for path in sorted((REPO_ROOT / "bench").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if path.stem in ("__init__", "common") or not doc:
            continue
        rows.append([f"`bench.{path.stem}`", cell(doc.split("\n\n")[0])])
    return table(["module", "what it measures"], rows) + "\n"


# ---------------------------------------------------------------------------------------------- deployments


def deployment_names() -> set[str]:
    """`flow/deployment` for every deployment in prefect.yaml (the flow's name from its `@flow(name=...)`)."""
    import yaml

    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    names: set[str] = set()
    for d in spec.get("deployments", []):
        file, _, func = d["entrypoint"].partition(":")
        flow_name = func
        for node in ast.walk(ast.parse((REPO_ROOT / file).read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == func:
                for deco in node.decorator_list:
                    if isinstance(deco, ast.Call):
                        for kw in deco.keywords:
                            if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                                flow_name = str(kw.value.value)
        names.add(f"{flow_name}/{d['name']}")
    return names
