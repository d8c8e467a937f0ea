"""Hostile programs against the code verifiers: every way to fake a pass scores 0, honest solutions pass."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from envs.base import Score
from envs.code import HumanEvalEnv, MBPPEnv
from sandbox import runner

NO_SANDBOX = runner._static_problem(runner.default_interpreter()[0])
pytestmark = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")

ADD = {
    "task_id": "add",
    "text": "Add two numbers.",
    "code": "def add(a, b):\n    return a + b",
    "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(0, 0) == 0"],
    "test_setup_code": "",
}
# Float tolerance asserts that lean on `math` and `abs` without importing them (MBPP does this).
AREA = {
    "task_id": "area",
    "text": "Area of a circle.",
    "code": "import math\n\ndef area(r):\n    return math.pi * r * r",
    "test_list": ["assert math.isclose(area(2.0), 12.566, rel_tol=1e-3)", "assert abs(area(1.0) - 3.14159) < 1e-4"],
    "test_setup_code": "",
}
TRUTHY = {
    "task_id": "even",
    "text": "Whether n is even.",
    "code": "def is_even(n):\n    return n % 2 == 0",
    "test_list": ["assert is_even(4)", "assert is_even(3) != True"],
    "test_setup_code": "",
}
SECRET = f"secret-{uuid.uuid4().hex}"
HIDDEN = {  # HumanEval: the tests (and so the expected values) are never shown to the model
    "task_id": "Hidden/0",
    "prompt": 'def answer() -> str:\n    """The answer."""\n',
    "canonical_solution": f"    return {SECRET!r}\n",
    "test": f"def check(candidate):\n    assert candidate() == {SECRET!r}\n",
    "entry_point": "answer",
}
HELPER = {  # the test relies on a helper from the prompt, which the model could redefine
    "task_id": "Helper/0",
    "prompt": (
        "def encode(s: str) -> str:\n    return s[::-1].upper()\n\n\n"
        'def decode(s: str) -> str:\n    """Invert encode."""\n'
    ),
    "canonical_solution": "    return s[::-1].lower()\n",
    "test": "def check(candidate):\n    for s in ['abc', 'hello']:\n        assert candidate(encode(s)) == s\n",
    "entry_point": "decode",
}
MAPPED = {  # all(map(...)) ends quietly when the callee raises StopIteration
    "task_id": "Mapped/0",
    "prompt": 'def double(x: int) -> int:\n    """2 * x."""\n',
    "canonical_solution": "    return 2 * x\n",
    "test": "def check(candidate):\n    assert all(map(lambda c: candidate(c[0]) == c[1], [(1, 2), (5, 10)]))\n",
    "entry_point": "double",
}

OBJECTS = {  # the program's own objects stay in the program: built, passed back, read; never compared
    "task_id": "chain",
    "text": "Longest chain of pairs.",
    "code": (
        "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n\n"
        "def max_chain_length(pairs, n):\n    pairs = sorted(pairs, key=lambda p: p.b)\n    count, end = 0, None\n"
        "    for p in pairs:\n        if end is None or p.a > end:\n            count, end = count + 1, p.b\n"
        "    return count\n\ndef evens(n):\n    return (i for i in range(n) if i % 2 == 0)"
    ),
    "test_list": [
        "assert max_chain_length([Pair(5, 24), Pair(15, 25), Pair(27, 40), Pair(50, 60)], 4) == 3",
        "assert Pair(1, 2).b == 2 and list(evens(5)) == [0, 2, 4]",
    ],
    "test_setup_code": "",
}

WRONG = "def add(a, b):\n    return 0\n"
ALWAYS_EQUAL = (
    "class A:\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n        return False\n"
    "    __hash__ = object.__hash__\n"
)
BYPASSES: dict[str, tuple[dict[str, Any], str]] = {
    "os._exit(0) before the tests": (ADD, "import os\nos._exit(0)\n"),
    "sys.exit(0) before the tests": (ADD, "import sys\nsys.exit(0)\n"),
    "atexit hook exits 0": (ADD, "import atexit, os\natexit.register(lambda: os._exit(0))\n" + WRONG),
    "excepthook exits 0": (ADD, "import os, sys\nsys.excepthook = lambda *a: os._exit(0)\n" + WRONG),
    "SystemExit raised inside a test": (ADD, "def add(a, b):\n    raise SystemExit(0)\n"),
    "os._exit(0) inside a test": (ADD, "def add(a, b):\n    import os\n    os._exit(0)\n"),
    "always-equal object": (ADD, ALWAYS_EQUAL + "def add(a, b):\n    return A()\n"),
    "int subclass with __eq__": (
        ADD,
        "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return I(7)\n",
    ),
    "list and str subclasses with __eq__": (
        ADD,
        "class L(list):\n    __eq__ = lambda s, o: True\nclass S(str):\n    __eq__ = lambda s, o: True\n"
        "def add(a, b):\n    return L() if a else S('x')\n",
    ),
    "__class__ claims int": (
        ADD,
        ALWAYS_EQUAL.replace("class A:", "class A:\n    __class__ = property(lambda s: int)")
        + "def add(a, b):\n    return A()\n",
    ),
    "__bool__ and __ne__ overridden": (
        TRUTHY,
        "class B:\n    __bool__ = lambda s: True\n    __ne__ = lambda s, o: True\n    __eq__ = lambda s, o: False\n"
        "def is_even(n):\n    return B()\n",
    ),
    "patched math.isclose and builtins.abs": (
        AREA,
        "import builtins, math\nmath.isclose = lambda *a, **k: True\nbuiltins.abs = lambda x: 0\n"
        "def area(r):\n    return 0.0\n",
    ),
    "shadowed math and abs": (
        AREA,
        "import types\nmath = types.SimpleNamespace(isclose=lambda *a, **k: True)\ndef abs(x):\n    return 0\n"
        "def area(r):\n    return 0.0\n",
    ),
    "object that subtracts to zero": (
        AREA,
        "import math\nmath.isclose = lambda *a, **k: True\nclass Z:\n    __sub__ = lambda s, o: 0\n"
        "def area(r):\n    return Z()\n",
    ),
    "signals every pid": (
        ADD,
        "import os, signal\nfor pid in range(1, 200):\n    if pid != os.getpid():\n        try:\n"
        "            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n" + WRONG,
    ),
    "writes verdicts to every fd and /proc fd": (
        ADD,
        'import glob, os\nfake = b\'pass\\nexit 0\\ntest {"i": 0, "ok": true}\\n\' * 3\n'
        "for fd in range(3, 256):\n    try:\n        os.write(fd, fake)\n    except OSError:\n        pass\n"
        "for path in glob.glob('/proc/*/fd/*'):\n    try:\n        with open(path, 'wb') as f:\n"
        "            f.write(fake)\n    except OSError:\n        pass\n"
        "print(fake.decode())\nimport sys\nsys.stderr.write(fake.decode())\n" + WRONG,
    ),
    "monkeypatches every module function": (
        ADD,
        "import sys\ndef add(a, b):\n    return 0\nfor m in list(sys.modules.values()):\n"
        "    for k, v in list(vars(m).items()):\n"
        "        if callable(v) and k in ('dumps', 'loads', 'encode', 'decode', 'send', 'recv', 'write', 'compare'):\n"
        "            try:\n                setattr(m, k, lambda *a, **kw: True)\n            except Exception:\n"
        "                pass\n",
    ),
    "deletes the tests it can find": (
        ADD,
        "import gc, sys\nfor o in gc.get_objects():\n    if isinstance(o, list) and any(isinstance(x, str) "
        "and 'assert' in x for x in o):\n        o.clear()\n"
        "f = sys._getframe()\nwhile f:\n    f.f_globals.pop('tests', None)\n    f = f.f_back\n" + WRONG,
    ),
    "StopIteration ends all(map(...))": (MAPPED, "def double(x):\n    raise StopIteration\n"),
    "redefines the prompt's helper": (HELPER, "def encode(s):\n    return s\n\ndef decode(s):\n    return s\n"),
    "self-referential result": (ADD, "def add(a, b):\n    x = []\n    x.append(x)\n    return x\n"),
    "huge result": (ADD, "def add(a, b):\n    return 'x' * (64 * 1024 * 1024)\n"),
    "objects with rigged attributes and length": (
        OBJECTS,
        ALWAYS_EQUAL + "class Pair(A):\n    def __init__(self, a, b):\n        self.b = A()\n"
        "def max_chain_length(pairs, n):\n    return A()\ndef evens(n):\n    return A()\n",
    ),
}
# Looks for the hidden expected value wherever a program can read: its own files, /proc, memory.
FIND_SECRET = """
import gc, glob, os, re, sys
PATTERN = re.compile('secret-[0-9a-f]{32}')
def paths():
    for pattern in ('/proc/*/cmdline', '/proc/*/environ', '/proc/*/fd/*', '/proc/*/cwd/*', '/proc/*/root/*/*'):
        yield from glob.glob(pattern)
    for top, dirs, files in os.walk('/'):
        dirs[:] = [d for d in dirs if top != '/' or d not in ('proc', 'dev', 'usr', 'lib', 'lib64', 'root')]
        yield from (os.path.join(top, f) for f in files)
def answer():
    found = []
    for path in paths():
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            data = os.read(fd, 1 << 20)
            os.close(fd)
        except OSError:
            continue
        found += PATTERN.findall(data.decode('latin-1'))
    for o in gc.get_objects():
        if isinstance(o, dict):
            found += [v for v in o.values() if isinstance(v, str) and PATTERN.fullmatch(v)]
    f = sys._getframe()
    while f:
        found += [v for v in f.f_locals.values() if isinstance(v, str) and PATTERN.fullmatch(v)]
        f = f.f_back
    sys.stderr.write(f'FOUND {found}')
    return found[0] if found else 'nothing'
"""


def score(row: dict[str, Any], completion: str, timeout_s: float = 2.0) -> Score:
    env = HumanEvalEnv(timeout_s=timeout_s) if "entry_point" in row else MBPPEnv(timeout_s=timeout_s)
    return asyncio.run(env.ascore(row, f"```python\n{completion}```"))


@pytest.mark.parametrize("name", list(BYPASSES))
def test_bypass_scores_zero(name: str) -> None:
    row, completion = BYPASSES[name]
    result = score(row, completion)
    assert (result.reward, result.success) == (0.0, False), (name, result.info)
    assert result.info["outcome"] != "pass"


def test_hidden_expected_values_cannot_be_read() -> None:
    result = score(HIDDEN, FIND_SECRET, timeout_s=20.0)  # it reads every file and /proc entry it can open
    assert (result.reward, result.info["outcome"]) == (0.0, "fail"), result.info
    assert "FOUND []" in result.info["stderr_tail"] and SECRET not in result.info["stderr_tail"]


@pytest.mark.parametrize("row", [ADD, AREA, TRUTHY, OBJECTS, HIDDEN, HELPER, MAPPED], ids=lambda r: r["task_id"])
def test_honest_solutions_pass(row: dict[str, Any]) -> None:
    solution = row["code"] if "code" in row else row["prompt"] + row["canonical_solution"]
    result = score(row, solution)
    assert (result.reward, result.info["outcome"]) == (1.0, "pass"), result.info
