"""The offline programming problems (MBPP and HumanEval formats) that scripts/make_code_sets.py writes."""
