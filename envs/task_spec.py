"""Declarative single-turn tasks: the pydantic models of a task file, and a loader whose errors name file:line.

A task (a YAML file, or an inline mapping in a run config) describes a benchmark without Python: its dataset,
jinja prompt, few-shot examples, answer extraction and scorers; envs.task_env builds the environment. All of
it is checked here, at load (regexes compiled, templates parsed, their variables against `fields`, files
found), so a typo fails in one line naming the file, the line and the field, before any GPU time is spent.
"""

from __future__ import annotations

import csv
import difflib
import io
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import IO, Annotated, Any, Literal, NoReturn, cast

import fsspec
import pyarrow.parquet as pq
import yaml
from jinja2 import Template as JinjaTemplate
from jinja2 import TemplateSyntaxError, meta
from jinja2.runtime import StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from envs.base import DatasetError
from envs.datasets import is_hf_dataset, parse_hf_dataset
from envs.extract import normalize_number
from envs.task_extract import Extractors, Letters, as_list
from envs.task_kinds import Extractor, NonEmpty, Scorer, ScorerKind, TaskModel, kind_fields
from errors import EvalflowError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.,@:/-]*$")
# Score.info keys every task writes besides its metrics' own.
RESERVED_KEYS = ("parse_error", "answers")
DEFAULT_KEY = "correct"
DEFAULT_LETTERS = "ABCD"
_EXTRACTORS: TypeAdapter[list[Extractor]] = TypeAdapter(Extractors)
DATA_SUFFIXES = {".jsonl": "jsonl", ".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")
# Names a template may use besides the row's fields: the multiple-choice letters.
TEMPLATE_GLOBALS = ("letters",)

# lm-eval renders its templates the same way (StrictUndefined, trailing newlines kept); the sandbox (immutable:
# no list.append either) means a task file can read rows but never run code or change them.
JINJA = ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
JINJA.filters["number"] = lambda value: normalize_number(str(value))  # lm-eval's `$1,234.` -> `1234`


class TaskSpecError(EvalflowError, ValueError):
    """A task file or inline task cannot be used; one line: `file:line: field: problem`."""

    kind = "config"


@lru_cache(maxsize=4096)
def compile_template(source: str) -> JinjaTemplate:
    """A template compiled once per process (rendering runs per row and per few-shot example)."""
    return JINJA.from_string(source)


def template_variables(source: str) -> set[str]:
    """The names a template reads from its context (row fields or globals)."""
    return set(meta.find_undeclared_variables(JINJA.parse(source)))


def _check_template(source: str) -> str:
    try:
        JINJA.parse(source)
    except TemplateSyntaxError as e:
        raise PydanticCustomError(
            "template", "template syntax error: {message}", {"message": e.message or "", "template_line": e.lineno}
        ) from None
    return source


def _check_name(value: str) -> str:
    if not NAME_RE.match(value):
        raise ValueError(f"{value!r} must be letters, digits and '_.-', starting with a letter or digit")
    return value


def _as_str(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


Template = Annotated[str, AfterValidator(_check_template)]
Name = Annotated[str, BeforeValidator(_as_str), AfterValidator(_check_name)]


class Metric(TaskModel):
    key: NonEmpty
    label: str | None = None  # default: the key
    description: str = ""
    headline: bool = False
    lm_eval_name: str | None = None
    extract: Extractors | None = None  # default: the task's, else by scorer
    scorer: Scorer | None = None  # default: the task's
    reference_field: str | None = None  # default: the task's reference
    reference: Template | None = None

    @property
    def resolved_scorer(self) -> ScorerKind:
        """The metric's scorer: its own or the task's (a loaded TaskSpec gives every metric one)."""
        if self.scorer is None:
            raise ValueError(f"metric {self.key!r} has no scorer: load the task with load_task_spec")
        return self.scorer


class Message(TaskModel):
    role: Literal["system", "user", "assistant"]
    content: Template


class PromptSpec(TaskModel):
    user: Template | None = None
    messages: list[Message] | None = None
    completion: Template | None = None

    @model_validator(mode="after")
    def _one(self) -> PromptSpec:
        given = [k for k in ("user", "messages", "completion") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of user, messages, completion (got {', '.join(given) or 'none'})")
        if self.messages is not None and (not self.messages or self.messages[-1].role != "user"):
            raise ValueError("messages must end with a user message")
        return self

    @property
    def mode(self) -> Literal["chat", "completion"]:
        return "completion" if self.completion is not None else "chat"


class FewshotSpec(TaskModel):
    source: NonEmpty  # a file (relative to the task file) or hf-dataset:...?split=train
    n: Annotated[int, Field(ge=0)]
    seed: int | None = None  # None: the first n in file order; else a fixed shuffle by this seed
    target: Template  # what the assistant answers in an example
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"


class ChoicesSpec(TaskModel):
    field: str | None = None  # the row field listing the options' texts
    letters: Letters = DEFAULT_LETTERS


class TaskSpec(TaskModel):
    """A task file, validated; after load every metric has its scorer, extractors and reference filled in."""

    name: Name
    version: Name = "1"
    description: str = ""
    dataset: NonEmpty
    id_field: NonEmpty = "id"
    fields: list[NonEmpty] | None = None  # the row fields templates may use (default: those they use)
    prompt: Annotated[PromptSpec, BeforeValidator(lambda v: {"user": v} if isinstance(v, str) else v)]
    system_prompt: Template | None = None
    fewshot: FewshotSpec | None = None
    stop: Annotated[list[NonEmpty] | None, BeforeValidator(as_list)] = None
    choices: ChoicesSpec | None = None
    reference_field: str | None = None
    reference: Template | None = None
    extract: Extractors | None = None
    scorer: Scorer | None = None
    metrics: Annotated[list[Metric], Field(min_length=1)] | None = None
    reward: Annotated[list[str] | None, BeforeValidator(as_list)] = None  # first metric that found an answer
    majority_vote: bool = True

    @model_validator(mode="after")
    def _resolve(self) -> TaskSpec:
        if self.reference is not None and self.reference_field is not None:
            _fail("reference", "give reference_field or a reference template, not both")
        if self.reference is None and self.reference_field is None:
            self.reference_field = "answer"
        if self.system_prompt is not None and self.prompt.messages and self.prompt.messages[0].role == "system":
            _fail("system_prompt", "prompt.messages already starts with a system message")
        if self.metrics is None:
            if self.scorer is None:
                _fail("scorer", "missing: give a scorer, or metrics each with one")
            self.metrics = [Metric(key=DEFAULT_KEY)]
        seen: dict[str, int] = {}
        for i, m in enumerate(self.metrics):
            if not KEY_RE.match(m.key) or m.key in RESERVED_KEYS:
                _fail(f"metrics.{i}.key", f"{m.key!r} is not a usable key (reserved: {', '.join(RESERVED_KEYS)})")
            if m.key in seen:
                _fail(f"metrics.{i}.key", f"duplicate metric key {m.key!r} (also metrics.{seen[m.key]}.key)")
            seen[m.key] = i
            m.scorer = m.scorer or self.scorer
            if m.scorer is None:
                _fail(f"metrics.{i}", "no scorer: give metrics[].scorer or a task-level scorer")
            m.extract = m.extract or self.extract or _EXTRACTORS.validate_python(m.scorer.default_extractor)
            if m.reference is not None and m.reference_field is not None:
                _fail(f"metrics.{i}.reference", "give reference_field or a reference template, not both")
            if m.reference is None and m.reference_field is None:
                m.reference, m.reference_field = self.reference, self.reference_field
            m.label = m.label or m.key
        for i, m in enumerate(self.metrics):  # a judge checked against another metric's verdict (calibration)
            other = getattr(m.scorer, "calibrate_with", None)
            if other is not None and (other not in seen or other == m.key):
                _fail(
                    f"metrics.{i}.scorer.calibrate_with",
                    f"names no other metric: {other!r}; metrics: {', '.join(seen)}",
                )
        self.reward = self.reward or [self.metrics[0].key]
        for j, key in enumerate(self.reward):
            if key not in seen:
                _fail(f"reward.{j}", f"names no metric: {key!r}; metrics: {', '.join(seen)}")
        self._check_fields()
        return self

    def templates(self) -> dict[str, str]:
        """Every template by its dotted place in the file (for messages and variable checks)."""
        found = {"prompt.user": self.prompt.user, "prompt.completion": self.prompt.completion}
        found |= {f"prompt.messages.{i}.content": m.content for i, m in enumerate(self.prompt.messages or [])}
        found |= {"system_prompt": self.system_prompt, "reference": self.reference}
        found["fewshot.target"] = self.fewshot.target if self.fewshot else None
        found |= {f"metrics.{i}.reference": m.reference for i, m in enumerate(self.metrics or [])}
        return {at: t for at, t in found.items() if t is not None}

    def row_templates(self) -> dict[str, str]:
        """The templates rendered with a dataset row (all but the few-shot target)."""
        return {at: t for at, t in self.templates().items() if at != "fewshot.target"}

    def _check_fields(self) -> None:
        # `fields` describes the dataset's rows; the few-shot target reads the examples' own.
        used = {at: template_variables(t) - set(TEMPLATE_GLOBALS) for at, t in self.row_templates().items()}
        if self.fields is None:
            self.fields = sorted(set().union(*used.values()))
            return
        for at, names in used.items():
            if unknown := sorted(names - set(self.fields)):
                _fail(at, f"the template uses {unknown[0]!r}, which is not among fields ({', '.join(self.fields)})")

    @property
    def letters(self) -> str:
        return self.choices.letters if self.choices else DEFAULT_LETTERS


def _fail(at: str, message: str) -> NoReturn:
    raise PydanticCustomError("task", "{message}", {"message": message, "at": at})


# --- loading ------------------------------------------------------------------------------------------------


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


def _field_names() -> list[str]:
    """Every field name a task file may use (the registered kinds' options included), for "did you mean"."""
    return sorted({f for cls in _subclasses(TaskModel) for f in cls.model_fields} - {"kind"} | set(kind_fields()))


class _Doc:
    """Where a task came from; turns a pydantic error location into `file:line: dotted.field: problem`."""

    def __init__(self, label: str, root: Any, inline: bool) -> None:
        self.label, self.root, self.inline = label, root, inline

    def error(
        self, loc: tuple[Any, ...], message: str, missing: bool = False, template_line: int | None = None
    ) -> TaskSpecError:
        node, mark, parts = self.root, self.root, []
        for i, part in enumerate(loc):
            found = _child(node, part)
            if found is None:
                if missing and i == len(loc) - 1 and isinstance(part, str):
                    parts.append(str(part))
                continue
            mark, node = found
            parts.append(str(part))
        dotted = ".".join(parts)
        if self.inline:
            return TaskSpecError(f"{'.'.join(p for p in (self.label, dotted) if p)}: {message}")
        line = mark.start_mark.line + 1
        if template_line is not None and isinstance(node, yaml.ScalarNode):
            if node.style in ("|", ">"):  # the content starts on the line after the indicator
                line = node.start_mark.line + 1 + template_line
            elif node.end_mark.line > node.start_mark.line:  # a multi-line plain or quoted scalar
                line = node.start_mark.line + template_line
        return TaskSpecError(f"{self.label}:{line}: {dotted + ': ' if dotted else ''}{message}")


def _child(node: Any, part: Any) -> tuple[Any, Any] | None:
    """(node whose line to report, value node) of a mapping key or list index, in a YAML node tree or plain data."""
    if isinstance(node, yaml.MappingNode):
        return next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)), None)
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return node.value[part], node.value[part]
    if isinstance(node, Mapping) and part in node:
        return node[part], node[part]
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part], node[part]
    return None


def _message(err: Any) -> tuple[tuple[Any, ...], str]:
    """A pydantic error's location and message, in the task file's words."""
    loc, kind, ctx, value = tuple(err["loc"]), err["type"], err.get("ctx") or {}, err.get("input")
    if kind in ("task", "kind"):  # "kind": a kind's name or shape (envs.task_kinds), at `kind` where the file has one
        at = tuple(int(p) if p.isdigit() else p for p in ctx["at"].split(".")) if ctx.get("at") else ()
        return loc + at, ctx["message"]
    if kind == "value_error":
        return loc, str(ctx["error"])
    if kind == "template":
        return loc, err["msg"]
    if kind == "missing":
        return loc, "missing required field"
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _field_names(), n=1)
        return loc, f"unknown field {loc[-1]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    scalar = value is None or isinstance(value, str | int | float | bool)
    return loc, err["msg"] + (f", got {value!r}" if scalar else "")


def _read_yaml(path: Path, label: str) -> tuple[Any, Any]:
    """(data, node tree) of a YAML file; every problem one TaskSpecError line."""
    if path.suffix not in (".yaml", ".yml"):
        raise TaskSpecError(f"{label}: a task file must end in .yaml or .yml")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        where = "a relative path starts from the working directory"
        raise TaskSpecError(f"{path}: task file not found ({where})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TaskSpecError(f"{label}: cannot read the task file: {e}") from None
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise TaskSpecError(f"{label}{line}: invalid YAML: {' '.join(str(e.problem or e.context).split())}") from None
    except yaml.YAMLError as e:
        raise TaskSpecError(f"{label}: invalid YAML: {' '.join(str(e).split())}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise TaskSpecError(f"{label}:1: expected a mapping of task fields, got {type(data).__name__}")
    _no_duplicate_keys(root, label)
    return data, root


def _no_duplicate_keys(node: Any, label: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    raise TaskSpecError(f"{label}:{key.start_mark.line + 1}: {key.value}: duplicate key")
                seen.add(key.value)
            _no_duplicate_keys(value, label)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _no_duplicate_keys(item, label)


def load_task_spec(source: str | Path | Mapping[str, Any], *, where: str) -> TaskSpec:
    """A task file (absolute .yaml/.yml path) or inline mapping (named `where` in messages), validated.

    Relative local paths in it (dataset, few-shot source) are resolved once, against the file's folder (an
    inline task: the working directory); URLs (`s3://`, `hf://`, `hf-dataset:`) are kept as they are.
    """
    if isinstance(source, Mapping):
        doc, data, base = _Doc(where, dict(source), inline=True), dict(source), Path.cwd()
    else:
        path = Path(source).expanduser()
        label = os.path.relpath(path) if path.is_absolute() and path.is_relative_to(Path.cwd()) else str(path)
        data, root = _read_yaml(path, label)
        doc, base = _Doc(label, root, inline=False), path.resolve().parent
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc, message = _message(err)
        line = (err.get("ctx") or {}).get("template_line")
        raise doc.error(loc, message, missing=err["type"] in ("missing", "task"), template_line=line) from None
    return _with_files(spec, doc, base)


def is_local(spec: str) -> bool:
    """Whether a dataset spec is a local path (not `hf-dataset:`, not a URL such as `s3://` or `hf://`)."""
    return not is_hf_dataset(spec) and "://" not in spec


def data_format(spec: str) -> str | None:
    """ "jsonl", "parquet" or "csv" by the file's suffix (after a compression suffix); None if none of them."""
    name = spec.split("?", 1)[0].lower()
    for suffix in COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    return next((fmt for suffix, fmt in DATA_SUFFIXES.items() if name.endswith(suffix)), None)


def _with_files(spec: TaskSpec, doc: _Doc, base: Path) -> TaskSpec:
    """Resolve local paths against `base` and check the files are there (and hold enough few-shot examples)."""
    dataset = _checked_source(spec.dataset, ("dataset",), doc, base)
    fewshot = spec.fewshot
    if fewshot is not None:
        source = _checked_source(fewshot.source, ("fewshot", "source"), doc, base)
        if is_local(source):
            count = _count_rows(source)
            if fewshot.n > count:
                raise doc.error(("fewshot", "n"), f"{fewshot.n} shots, but {source} has {count} examples")
        fewshot = fewshot.model_copy(update={"source": source})
    return spec.model_copy(update={"dataset": dataset, "fewshot": fewshot})


def _checked_source(spec: str, loc: tuple[str, ...], doc: _Doc, base: Path) -> str:
    if is_hf_dataset(spec):
        try:
            parse_hf_dataset(spec)
        except DatasetError as e:
            raise doc.error(loc, str(e)) from None
        return spec
    if data_format(spec) is None:
        raise doc.error(loc, f"{spec}: expected a .jsonl, .parquet or .csv file (optionally compressed)")
    if not is_local(spec):
        return spec
    path = Path(os.path.abspath(base / Path(spec).expanduser()))
    if not path.is_file():
        raise doc.error(loc, f"no such file: {path}")
    return str(path)


def _count_rows(path: str) -> int:
    """Rows of a local JSONL, CSV or parquet file (for the few-shot check at load)."""
    fmt = data_format(path)
    if fmt == "parquet":
        return pq.ParquetFile(path).metadata.num_rows
    with fsspec.open(path, "rb", compression="infer") as f:
        if fmt == "csv":
            return sum(1 for _ in csv.DictReader(io.TextIOWrapper(cast(IO[bytes], f), encoding="utf-8", newline="")))
        return sum(1 for line in f if line.strip())
