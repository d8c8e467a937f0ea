"""The offline HumanEval-style problems, written for this repository, as Python literals."""

# (entry point, prompt, canonical solution, test) in HumanEval's format.
HUMANEVAL: list[tuple[str, str, str, str]] = [
    (
        "sum_even",
        '''\
from typing import List


def sum_even(numbers: List[int]) -> int:
    """Return the sum of the even numbers in the list.
    >>> sum_even([1, 2, 3, 4])
    6
    >>> sum_even([])
    0
    """
''',
        """\
    return sum(n for n in numbers if n % 2 == 0)
""",
        """\
def check(candidate):
    assert candidate([1, 2, 3, 4]) == 6
    assert candidate([]) == 0
    assert candidate([-2, 3, 5]) == -2
    assert candidate([1, 3, 5]) == 0
""",
    ),
    (
        "running_max",
        '''\
from typing import List


def running_max(numbers: List[int]) -> List[int]:
    """Return the list of maximums seen so far at each position.
    >>> running_max([1, 3, 2, 5, 4])
    [1, 3, 3, 5, 5]
    """
''',
        """\
    out = []
    best = None
    for n in numbers:
        best = n if best is None else max(best, n)
        out.append(best)
    return out
""",
        """\
def check(candidate):
    assert candidate([1, 3, 2, 5, 4]) == [1, 3, 3, 5, 5]
    assert candidate([]) == []
    assert candidate([-5, -7, -1]) == [-5, -5, -1]
""",
    ),
    (
        "is_balanced",
        '''\
def is_balanced(text: str) -> bool:
    """Return True if every bracket in the text, (), [] or {}, is closed in the right order;
    other characters are ignored.
    >>> is_balanced('([]{})')
    True
    >>> is_balanced('(]')
    False
    """
''',
        """\
    pairs = {')': '(', ']': '[', '}': '{'}
    stack = []
    for ch in text:
        if ch in '([{':
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack
""",
        """\
def check(candidate):
    assert candidate('([]{})') is True
    assert candidate('(]') is False
    assert candidate('a(b)c') is True
    assert candidate('((') is False
    assert candidate('') is True
""",
    ),
    (
        "caesar_shift",
        '''\
def caesar_shift(text: str, k: int) -> str:
    """Shift every lowercase letter k places forward in the alphabet, wrapping
    around from z to a; other characters stay the same.
    >>> caesar_shift('abc xyz', 2)
    'cde zab'
    """
''',
        """\
    return ''.join(chr((ord(c) - 97 + k) % 26 + 97) if 'a' <= c <= 'z' else c for c in text)
""",
        """\
def check(candidate):
    assert candidate('abc xyz', 2) == 'cde zab'
    assert candidate('hello', 0) == 'hello'
    assert candidate('Hi!', 27) == 'Hj!'
""",
    ),
    (
        "nth_prime",
        '''\
def nth_prime(n: int) -> int:
    """Return the n-th prime number, counting from nth_prime(1) == 2.
    >>> nth_prime(1)
    2
    >>> nth_prime(5)
    11
    """
''',
        """\
    count, candidate = 0, 1
    while count < n:
        candidate += 1
        if all(candidate % d for d in range(2, int(candidate ** 0.5) + 1)):
            count += 1
    return candidate
""",
        """\
def check(candidate):
    assert candidate(1) == 2
    assert candidate(5) == 11
    assert candidate(100) == 541
""",
    ),
    (
        "compress_spaces",
        '''\
def compress_spaces(s: str) -> str:
    """Replace every run of whitespace with a single space and strip both ends.
    >>> compress_spaces('  a   b\\tc ')
    'a b c'
    """
''',
        """\
    return ' '.join(s.split())
""",
        """\
def check(candidate):
    assert candidate('  a   b\\tc ') == 'a b c'
    assert candidate('') == ''
    assert candidate('one') == 'one'
""",
    ),
    (
        "pascal_row",
        '''\
from typing import List


def pascal_row(n: int) -> List[int]:
    """Return row n of Pascal's triangle, where row 0 is [1].
    >>> pascal_row(4)
    [1, 4, 6, 4, 1]
    """
''',
        """\
    row = [1]
    for _ in range(n):
        row = [a + b for a, b in zip([0] + row, row + [0])]
    return row
""",
        """\
def check(candidate):
    assert candidate(0) == [1]
    assert candidate(4) == [1, 4, 6, 4, 1]
    assert candidate(6) == [1, 6, 15, 20, 15, 6, 1]
""",
    ),
    (
        "count_squares",
        '''\
from typing import List


def is_square(n: int) -> bool:
    """Return True if n is a perfect square."""
    if n < 0:
        return False
    r = int(n ** 0.5)
    while r * r > n:
        r -= 1
    while (r + 1) * (r + 1) <= n:
        r += 1
    return r * r == n


def count_squares(numbers: List[int]) -> int:
    """Count the perfect squares in the list, using is_square.
    >>> count_squares([1, 2, 4, 7, 9])
    3
    """
''',
        """\
    return sum(1 for n in numbers if is_square(n))
""",
        """\
def check(candidate):
    assert candidate([1, 2, 4, 7, 9]) == 3
    assert candidate([]) == 0
    assert candidate([-4, 0, 16, 15]) == 2
""",
    ),
    (
        "most_common_char",
        '''\
def most_common_char(s: str) -> str:
    """Return the character that occurs most often in a non-empty string;
    on a tie, the one that occurs first.
    >>> most_common_char('abracadabra')
    'a'
    >>> most_common_char('xyyx')
    'x'
    """
''',
        """\
    best = s[0]
    for ch in s:
        if s.count(ch) > s.count(best):
            best = ch
    return best
""",
        """\
def check(candidate):
    assert candidate('abracadabra') == 'a'
    assert candidate('xyyx') == 'x'
    assert candidate('zzy') == 'z'
    assert candidate('q') == 'q'
""",
    ),
    (
        "interleave",
        '''\
from typing import List


def interleave(a: List[int], b: List[int]) -> List[int]:
    """Alternate elements of a and b, starting with a; append what is left of the
    longer list.
    >>> interleave([1, 2, 3], [10, 20])
    [1, 10, 2, 20, 3]
    """
''',
        """\
    out = []
    for i in range(max(len(a), len(b))):
        if i < len(a):
            out.append(a[i])
        if i < len(b):
            out.append(b[i])
    return out
""",
        """\
def check(candidate):
    assert candidate([1, 2, 3], [10, 20]) == [1, 10, 2, 20, 3]
    assert candidate([], [1, 2]) == [1, 2]
    assert candidate([5], []) == [5]
""",
    ),
    (
        "to_snake_case",
        '''\
def to_snake_case(name: str) -> str:
    """Convert a camelCase or PascalCase name to snake_case.
    >>> to_snake_case('parseHttpResponse')
    'parse_http_response'
    """
''',
        """\
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i > 0:
            out.append('_')
        out.append(ch.lower())
    return ''.join(out)
""",
        """\
def check(candidate):
    assert candidate('parseHttpResponse') == 'parse_http_response'
    assert candidate('Value') == 'value'
    assert candidate('x') == 'x'
""",
    ),
    (
        "digits_product",
        '''\
def digits_product(n: int) -> int:
    """Return the product of the non-zero digits of a positive integer.
    >>> digits_product(1203)
    6
    """
''',
        """\
    product = 1
    for d in str(n):
        if d != '0':
            product *= int(d)
    return product
""",
        """\
def check(candidate):
    assert candidate(1203) == 6
    assert candidate(5) == 5
    assert candidate(1000) == 1
    assert candidate(999) == 729
""",
    ),
]
