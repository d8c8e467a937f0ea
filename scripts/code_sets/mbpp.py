"""The offline MBPP-style problems, written for this repository, as Python literals."""

# (text, reference code, three asserts) in MBPP's format.
MBPP: list[tuple[str, str, list[str]]] = [
    (
        "Write a function to reverse the order of the words in a string (words are separated by single spaces).",
        "def reverse_words(s):\n    return ' '.join(reversed(s.split(' ')))",
        [
            "assert reverse_words('hello world') == 'world hello'",
            "assert reverse_words('a b c') == 'c b a'",
            "assert reverse_words('python') == 'python'",
        ],
    ),
    (
        "Write a function to count the vowels (a, e, i, o, u, either case) in a string.",
        "def count_vowels(s):\n    return sum(1 for ch in s.lower() if ch in 'aeiou')",
        [
            "assert count_vowels('Programming') == 3",
            "assert count_vowels('AEIOU xyz') == 5",
            "assert count_vowels('rhythm') == 0",
        ],
    ),
    (
        "Write a function to check whether a string is a palindrome, ignoring case and non-alphanumeric characters.",
        "def is_palindrome(s):\n    t = [ch.lower() for ch in s if ch.isalnum()]\n    return t == t[::-1]",
        [
            "assert is_palindrome('A man, a plan, a canal: Panama') == True",
            "assert is_palindrome('race a car') == False",
            "assert is_palindrome('No lemon, no melon') == True",
        ],
    ),
    (
        "Write a function to find the second largest distinct number in a list.",
        "def second_largest(nums):\n    return sorted(set(nums))[-2]",
        [
            "assert second_largest([1, 2, 3, 4, 5]) == 4",
            "assert second_largest([5, 5, 4, 4, 3]) == 4",
            "assert second_largest([-1, -7, -3]) == -3",
        ],
    ),
    (
        "Write a function to flatten a nested list of any depth into a flat list.",
        "def flatten(lst):\n"
        "    out = []\n"
        "    for item in lst:\n"
        "        if isinstance(item, list):\n"
        "            out.extend(flatten(item))\n"
        "        else:\n"
        "            out.append(item)\n"
        "    return out",
        [
            "assert flatten([1, [2, [3, [4]], 5]]) == [1, 2, 3, 4, 5]",
            "assert flatten([]) == []",
            "assert flatten([[1, 2], [3], [[4, 5]]]) == [1, 2, 3, 4, 5]",
        ],
    ),
    (
        "Write a function to count how often each character occurs in a string, returned as a dictionary.",
        "def char_frequency(s):\n"
        "    freq = {}\n"
        "    for ch in s:\n"
        "        freq[ch] = freq.get(ch, 0) + 1\n"
        "    return freq",
        [
            "assert char_frequency('banana') == {'b': 1, 'a': 3, 'n': 2}",
            "assert char_frequency('') == {}",
            "assert char_frequency('aaa') == {'a': 3}",
        ],
    ),
    (
        "Write a function to find the greatest common divisor of two positive integers.",
        "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a",
        [
            "assert gcd(12, 18) == 6",
            "assert gcd(17, 5) == 1",
            "assert gcd(100, 75) == 25",
        ],
    ),
    (
        "Write a function to find the least common multiple of a list of positive integers.",
        "from math import gcd\n"
        "def lcm_list(nums):\n"
        "    result = 1\n"
        "    for n in nums:\n"
        "        result = result * n // gcd(result, n)\n"
        "    return result",
        [
            "assert lcm_list([4, 6]) == 12",
            "assert lcm_list([2, 3, 5, 7]) == 210",
            "assert lcm_list([8, 12, 18]) == 72",
        ],
    ),
    (
        "Write a function to check whether a number is prime.",
        "def is_prime(n):\n"
        "    if n < 2:\n"
        "        return False\n"
        "    i = 2\n"
        "    while i * i <= n:\n"
        "        if n % i == 0:\n"
        "            return False\n"
        "        i += 1\n"
        "    return True",
        [
            "assert is_prime(2) == True",
            "assert is_prime(91) == False",
            "assert is_prime(97) == True",
        ],
    ),
    (
        "Write a function to return the n-th Fibonacci number, where fibonacci(0) is 0 and fibonacci(1) is 1.",
        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
        [
            "assert fibonacci(0) == 0",
            "assert fibonacci(10) == 55",
            "assert fibonacci(20) == 6765",
        ],
    ),
    (
        "Write a function to compute the sum of the digits of a non-negative integer.",
        "def digit_sum(n):\n    return sum(int(d) for d in str(n))",
        [
            "assert digit_sum(12345) == 15",
            "assert digit_sum(0) == 0",
            "assert digit_sum(9999) == 36",
        ],
    ),
    (
        "Write a function to merge two dictionaries, adding the values of keys that appear in both.",
        "def merge_dicts(d1, d2):\n"
        "    out = dict(d1)\n"
        "    for k, v in d2.items():\n"
        "        out[k] = out.get(k, 0) + v\n"
        "    return out",
        [
            "assert merge_dicts({'a': 1, 'b': 2}, {'b': 3, 'c': 4}) == {'a': 1, 'b': 5, 'c': 4}",
            "assert merge_dicts({}, {'x': 1}) == {'x': 1}",
            "assert merge_dicts({'k': 2}, {}) == {'k': 2}",
        ],
    ),
    (
        "Write a function to remove duplicates from a list while keeping the first occurrence of each item.",
        "def remove_duplicates(lst):\n"
        "    seen = set()\n"
        "    out = []\n"
        "    for x in lst:\n"
        "        if x not in seen:\n"
        "            seen.add(x)\n"
        "            out.append(x)\n"
        "    return out",
        [
            "assert remove_duplicates([1, 2, 1, 3, 2]) == [1, 2, 3]",
            "assert remove_duplicates(['a', 'b', 'a']) == ['a', 'b']",
            "assert remove_duplicates([]) == []",
        ],
    ),
    (
        "Write a function to split a list into chunks of size n (the last chunk may be shorter).",
        "def chunk_list(lst, n):\n    return [lst[i:i + n] for i in range(0, len(lst), n)]",
        [
            "assert chunk_list([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]",
            "assert chunk_list([1, 2, 3], 3) == [[1, 2, 3]]",
            "assert chunk_list([], 4) == []",
        ],
    ),
    (
        "Write a function to capitalize the first letter of every word in a string of space-separated words.",
        "def capitalize_words(s):\n    return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))",
        [
            "assert capitalize_words('hello big world') == 'Hello Big World'",
            "assert capitalize_words('python') == 'Python'",
            "assert capitalize_words('a bC d') == 'A BC D'",
        ],
    ),
    (
        "Write a function to run-length encode a string, writing each character followed by its run length.",
        "def run_length_encode(s):\n"
        "    out = []\n"
        "    i = 0\n"
        "    while i < len(s):\n"
        "        j = i\n"
        "        while j < len(s) and s[j] == s[i]:\n"
        "            j += 1\n"
        "        out.append(s[i] + str(j - i))\n"
        "        i = j\n"
        "    return ''.join(out)",
        [
            "assert run_length_encode('aaabbc') == 'a3b2c1'",
            "assert run_length_encode('') == ''",
            "assert run_length_encode('abab') == 'a1b1a1b1'",
        ],
    ),
    (
        "Write a function to check whether two strings are anagrams of each other (case-insensitive, ignoring spaces).",
        "def is_anagram(a, b):\n    norm = lambda s: sorted(s.replace(' ', '').lower())\n    return norm(a) == norm(b)",
        [
            "assert is_anagram('Listen', 'Silent') == True",
            "assert is_anagram('Dormitory', 'dirty room') == True",
            "assert is_anagram('apple', 'paple x') == False",
        ],
    ),
    (
        "Write a function to find the largest sum of a contiguous non-empty sublist of a list of integers.",
        "def max_subarray_sum(nums):\n"
        "    best = cur = nums[0]\n"
        "    for x in nums[1:]:\n"
        "        cur = max(x, cur + x)\n"
        "        best = max(best, cur)\n"
        "    return best",
        [
            "assert max_subarray_sum([-2, 1, -3, 4, -1, 2, 1, -5, 4]) == 6",
            "assert max_subarray_sum([-3, -1, -2]) == -1",
            "assert max_subarray_sum([5, 4, -1, 7, 8]) == 23",
        ],
    ),
    (
        "Write a function to convert a binary string to its decimal integer value.",
        "def binary_to_decimal(s):\n"
        "    value = 0\n"
        "    for ch in s:\n"
        "        value = value * 2 + (ch == '1')\n"
        "    return value",
        [
            "assert binary_to_decimal('1011') == 11",
            "assert binary_to_decimal('0') == 0",
            "assert binary_to_decimal('11111111') == 255",
        ],
    ),
    (
        "Write a function to convert a non-negative integer to its binary representation as a string.",
        "def decimal_to_binary(n):\n"
        "    if n == 0:\n"
        "        return '0'\n"
        "    bits = ''\n"
        "    while n:\n"
        "        bits = str(n % 2) + bits\n"
        "        n //= 2\n"
        "    return bits",
        [
            "assert decimal_to_binary(10) == '1010'",
            "assert decimal_to_binary(0) == '0'",
            "assert decimal_to_binary(255) == '11111111'",
        ],
    ),
    (
        "Write a function to count the occurrences of each word in a sentence, case-insensitively.",
        "def count_words(s):\n"
        "    counts = {}\n"
        "    for w in s.lower().split():\n"
        "        counts[w] = counts.get(w, 0) + 1\n"
        "    return counts",
        [
            "assert count_words('the cat and The hat') == {'the': 2, 'cat': 1, 'and': 1, 'hat': 1}",
            "assert count_words('') == {}",
            "assert count_words('a A a') == {'a': 3}",
        ],
    ),
    (
        "Write a function to rotate a list to the right by k positions.",
        "def rotate_list(lst, k):\n"
        "    if not lst:\n"
        "        return []\n"
        "    k %= len(lst)\n"
        "    return lst[-k:] + lst[:-k] if k else list(lst)",
        [
            "assert rotate_list([1, 2, 3, 4, 5], 2) == [4, 5, 1, 2, 3]",
            "assert rotate_list([1, 2, 3], 3) == [1, 2, 3]",
            "assert rotate_list([1, 2, 3], 4) == [3, 1, 2]",
        ],
    ),
    (
        "Write a function to transpose a matrix given as a list of rows.",
        "def transpose(matrix):\n    return [list(row) for row in zip(*matrix)]",
        [
            "assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]",
            "assert transpose([[1]]) == [[1]]",
            "assert transpose([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]",
        ],
    ),
    (
        "Write a function to compute the sum of the squares of the integers from 1 to n.",
        "def sum_of_squares(n):\n    return sum(i * i for i in range(1, n + 1))",
        [
            "assert sum_of_squares(3) == 14",
            "assert sum_of_squares(10) == 385",
            "assert sum_of_squares(1) == 1",
        ],
    ),
    (
        "Write a function to return the sorted list of distinct elements that two lists have in common.",
        "def common_elements(a, b):\n    return sorted(set(a) & set(b))",
        [
            "assert common_elements([1, 2, 3, 4], [3, 4, 5]) == [3, 4]",
            "assert common_elements([1, 1, 2], [2, 2, 1]) == [1, 2]",
            "assert common_elements([1, 2], [3, 4]) == []",
        ],
    ),
    (
        "Write a function to invert a dictionary, swapping its keys and values (values are unique).",
        "def invert_dict(d):\n    return {v: k for k, v in d.items()}",
        [
            "assert invert_dict({'a': 1, 'b': 2}) == {1: 'a', 2: 'b'}",
            "assert invert_dict({}) == {}",
            "assert invert_dict({1: 'x'}) == {'x': 1}",
        ],
    ),
    (
        "Write a function to find the longest word in a sentence; if several words are equally long, "
        "return the first one.",
        "def longest_word(s):\n"
        "    best = ''\n"
        "    for w in s.split():\n"
        "        if len(w) > len(best):\n"
        "            best = w\n"
        "    return best",
        [
            "assert longest_word('I love programming in python') == 'programming'",
            "assert longest_word('cat dog pig') == 'cat'",
            "assert longest_word('a bb ccc dd') == 'ccc'",
        ],
    ),
    (
        "Write a function to check whether a list is sorted in non-decreasing order.",
        "def is_sorted(lst):\n    return all(lst[i] <= lst[i + 1] for i in range(len(lst) - 1))",
        [
            "assert is_sorted([1, 2, 2, 5]) == True",
            "assert is_sorted([3, 1, 2]) == False",
            "assert is_sorted([]) == True",
        ],
    ),
    (
        "Write a function to count the pairs of positions i < j in a list whose elements add up to a target.",
        "def count_pairs(nums, target):\n"
        "    count = 0\n"
        "    for i in range(len(nums)):\n"
        "        for j in range(i + 1, len(nums)):\n"
        "            if nums[i] + nums[j] == target:\n"
        "                count += 1\n"
        "    return count",
        [
            "assert count_pairs([1, 5, 7, -1, 5], 6) == 3",
            "assert count_pairs([1, 1, 1, 1], 2) == 6",
            "assert count_pairs([1, 2, 3], 10) == 0",
        ],
    ),
    (
        "Write a function that classifies a triangle by its side lengths as 'equilateral', 'isosceles', "
        "'scalene', or 'invalid' if the sides cannot form a triangle.",
        "def triangle_type(a, b, c):\n"
        "    x, y, z = sorted((a, b, c))\n"
        "    if x <= 0 or x + y <= z:\n"
        "        return 'invalid'\n"
        "    if x == z:\n"
        "        return 'equilateral'\n"
        "    if x == y or y == z:\n"
        "        return 'isosceles'\n"
        "    return 'scalene'",
        [
            "assert triangle_type(3, 3, 3) == 'equilateral'",
            "assert triangle_type(3, 4, 5) == 'scalene'",
            "assert triangle_type(1, 2, 3) == 'invalid'",
        ],
    ),
    (
        "Write a function to convert a Roman numeral to an integer.",
        "def roman_to_int(s):\n"
        "    values = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
        "    total = 0\n"
        "    for i, ch in enumerate(s):\n"
        "        v = values[ch]\n"
        "        if i + 1 < len(s) and values[s[i + 1]] > v:\n"
        "            total -= v\n"
        "        else:\n"
        "            total += v\n"
        "    return total",
        [
            "assert roman_to_int('III') == 3",
            "assert roman_to_int('MCMXCIV') == 1994",
            "assert roman_to_int('XLII') == 42",
        ],
    ),
    (
        "Write a function to convert a positive integer (below 4000) to a Roman numeral.",
        "def int_to_roman(n):\n"
        "    table = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'),\n"
        "             (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n"
        "    out = ''\n"
        "    for value, numeral in table:\n"
        "        while n >= value:\n"
        "            out += numeral\n"
        "            n -= value\n"
        "    return out",
        [
            "assert int_to_roman(3) == 'III'",
            "assert int_to_roman(1994) == 'MCMXCIV'",
            "assert int_to_roman(2024) == 'MMXXIV'",
        ],
    ),
    (
        "Write a function to group words by their length, returning a dictionary from length to the list of "
        "words of that length in their original order.",
        "def group_by_length(words):\n"
        "    groups = {}\n"
        "    for w in words:\n"
        "        groups.setdefault(len(w), []).append(w)\n"
        "    return groups",
        [
            "assert group_by_length(['a', 'bb', 'c', 'ddd']) == {1: ['a', 'c'], 2: ['bb'], 3: ['ddd']}",
            "assert group_by_length([]) == {}",
            "assert group_by_length(['hi', 'yo']) == {2: ['hi', 'yo']}",
        ],
    ),
    (
        "Write a function to find the missing number in a list containing all integers from 0 to n except one.",
        "def missing_number(nums):\n    n = len(nums)\n    return n * (n + 1) // 2 - sum(nums)",
        [
            "assert missing_number([3, 0, 1]) == 2",
            "assert missing_number([0, 1]) == 2",
            "assert missing_number([9, 6, 4, 2, 3, 5, 7, 0, 1]) == 8",
        ],
    ),
]
