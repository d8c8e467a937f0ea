"""Runs INSIDE a throwaway environment with lm-evaluation-harness (bench/peers/envs.py builds it): the
bench's chat requests through lm-eval's `local-chat-completions` model, as `lm_eval --model
local-chat-completions --model_args num_concurrent=N` sends them, timed around `generate_until`.

One change to lm-eval: each request carries its own seed (the bench's per-rollout seed) instead of the
model's one `seed`, so every client asks the server exactly the same questions. It rides in the first
message and is taken out when lm-eval builds the payload: passing it in `gen_kwargs` instead would make
each request its own group, which lm-eval runs one after another.

    python lm_eval_driver.py REQUESTS.json BASE_URL MODEL CONCURRENCY TEMPERATURE MAX_TOKENS
prints one JSON line: {"seconds", "completions", "cpu_s"}.
"""

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENAI_API_KEY", "EMPTY")
os.environ.setdefault("TQDM_DISABLE", "1")

from lm_eval.api.instance import Instance
from lm_eval.models.api_models import JsonChatStr
from lm_eval.models.openai_completions import LocalChatCompletion


class SeededChat(LocalChatCompletion):
    def _create_payload(self, messages, generate=False, gen_kwargs=None, seed=1234, eos=None, **kwargs):
        if messages and isinstance(messages[0], dict) and "_seed" in messages[0]:
            seed = messages[0].pop("_seed")  # the messages are decoded afresh for every attempt
        return super()._create_payload(messages, generate=generate, gen_kwargs=gen_kwargs, seed=seed, eos=eos, **kwargs)


def main() -> None:
    path, base_url, model, concurrency, temperature, max_tokens = sys.argv[1:7]
    requests = json.loads(Path(path).read_text())
    lm = SeededChat(
        base_url=f"{base_url.rstrip('/')}/chat/completions",
        model=model,
        tokenizer_backend=None,
        tokenized_requests=False,
        num_concurrent=int(concurrency),
        max_retries=3,
        max_gen_toks=int(max_tokens),
        timeout=600,
    )
    gen_kwargs = {"temperature": float(temperature), "top_p": 1.0, "max_gen_toks": int(max_tokens), "do_sample": True}
    instances = []
    for i, request in enumerate(requests):
        messages = [dict(m) for m in request["messages"]]
        messages[0]["_seed"] = request["seed"]
        context = JsonChatStr(json.dumps(messages, ensure_ascii=False))
        instances.append(Instance("generate_until", doc={}, arguments=(context, dict(gen_kwargs)), idx=i))
    cpu, started = time.process_time(), time.perf_counter()
    outputs = lm.generate_until(instances)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    answered = sum(isinstance(o, str) and o != "" for o in outputs)
    print(json.dumps({"seconds": seconds, "completions": answered, "cpu_s": cpu}), flush=True)


if __name__ == "__main__":
    main()
