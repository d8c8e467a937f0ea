"""Count each request's prompt tokens as vLLM will: the chat template rendered (generation prompt, tools)
and tokenized without adding special tokens again; a plain prompt tokenized as the completions API does.

`python count_prompt_tokens.py JOB.json` inside the vLLM runtime; JOB holds the model folder, an optional
chat template file and the requests ({"messages", "tools"} or {"prompt"}); the result is their counts.
"""

from __future__ import annotations

import json
from typing import TypedDict

from _runtime_io import Failure, progress, run_main  # sibling module: this file runs as a script


class Request(TypedDict, total=False):
    """A plain prompt, or chat messages with their tools (the OpenAI request's own JSON)."""

    prompt: str
    messages: list[dict[str, object]]
    tools: list[dict[str, object]] | None


class PromptJob(TypedDict):
    folder: str
    chat_template: str | None
    requests: list[Request]


class PromptTokenCounts(TypedDict):
    """The result (evalflow reads it as results.PromptTokenCounts: keep the two in step)."""

    counts: list[int]


def main(argv: list[str]) -> PromptTokenCounts:
    if len(argv) != 1:
        raise Failure("usage: count_prompt_tokens.py JOB.json")
    with open(argv[0]) as fh:
        job: PromptJob = json.load(fh)
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(job["folder"])
    except Exception as exc:  # any load failure is the folder's problem, said in one line
        raise Failure(f"the tokenizer of {job['folder']} does not load ({type(exc).__name__}: {exc})") from None
    template = job.get("chat_template")
    counts = []
    requests = job["requests"]
    for i, request in enumerate(requests):
        if "prompt" in request:
            counts.append(len(tokenizer(request["prompt"])["input_ids"]))
        else:
            text = tokenizer.apply_chat_template(
                request["messages"], tools=request.get("tools"), chat_template=template,
                add_generation_prompt=True, tokenize=False,
            )  # fmt: skip
            counts.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
        if (i + 1) % 2000 == 0:
            progress(f"{i + 1}/{len(requests)} prompts counted")
    return PromptTokenCounts(counts=counts)


if __name__ == "__main__":
    run_main(main)
