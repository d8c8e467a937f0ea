"""Shopping-cart arithmetic: a one-file multi-turn tool-calling env (`examples/envs/shop_env.py:ShopEnv`).
Prices are hidden in the row, so the model must call `price(item)` before `submit(total)`; reward 1 if right."""

import json
from pathlib import Path
from typing import Any, ClassVar

from evalflow import DatasetError, Episode, MetricSpec, MultiTurnEnv, Score, Turn

SYSTEM = "You are a shop assistant. Look up every unit price with the price tool, then call submit with the total."
TOOLS = [
    {"type": "function", "function": {"name": name, "description": doc, "parameters": {"type": "object",
     "properties": {arg: {"type": kind}}, "required": [arg], "additionalProperties": False}}}
    for name, doc, arg, kind in [("price", "The unit price of one item, e.g. 'apple'.", "item", "string"),
                                 ("submit", "Submit the basket's total cost; this ends the task.", "total", "number")]
]  # fmt: skip


class ShopEpisode(Episode):
    """One basket: each tool call gets a tool message (the API wants one per call id), a bad one an error text."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.row, self.tool_calls = row, 0
        self.total: float | None = None  # set by a valid submit, which ends the episode
        self.prices = {k.lower().removesuffix("s"): v for k, v in row["prices"].items()}  # "apples" finds "apple"
        self.messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": row["question"]}]

    def step(self, assistant: dict[str, Any]) -> Turn:
        calls = assistant.get("tool_calls") or []  # none: a plain answer, which ends the episode unsubmitted
        replies = [{"role": "tool", "tool_call_id": c["id"], "content": self._run(c["function"])} for c in calls]
        return Turn(replies, done=not calls or self.total is not None)

    def _run(self, fn: dict[str, Any]) -> str:
        if self.total is not None:
            return "Error: already submitted; this call was not executed."
        self.tool_calls += 1
        try:  # dict() makes a JSON string, number or null fail like bad JSON
            args = dict(json.loads(fn.get("arguments") or "{}"))
        except (ValueError, TypeError):
            return "Error: the arguments must be a JSON object."
        if fn.get("name") == "price":
            price = self.prices.get(item := str(args.get("item", "")).strip().lower().removesuffix("s"))
            return f"{price}" if price is not None else f"Error: unknown item {item!r}; we sell {sorted(self.prices)}."
        if fn.get("name") == "submit":
            self.total = float(args["total"]) if type(args.get("total")) in (int, float) else None
            return "Submitted." if self.total is not None else "Error: total must be a number."
        return f"Error: unknown tool {fn.get('name')!r}; the tools are price and submit."

    def result(self) -> Score:
        ok = self.total is not None and round(self.total, 2) == round(float(self.row["answer"]), 2)
        parsed = None if self.total is None else f"{self.total:.2f}"
        return Score(float(ok), ok, parsed, {"tool_calls": self.tool_calls, "submitted": self.total is not None})


class ShopEnv(MultiTurnEnv):
    """Rows `{"id", "prices": {item: number}, "question", "answer": number}`. Option `tool_choice`: auto, or
    required (a tool call every turn, for small models that never call tools on their own)."""

    name: ClassVar[str] = "shop"
    version: ClassVar[str] = "1"
    default_dataset: ClassVar[str] = "examples/envs/shop.jsonl"
    max_turns = 6
    metrics: ClassVar[tuple[MetricSpec, ...]] = (
        MetricSpec("submitted", "submitted", "rate", description="the model called submit with a number"),
        MetricSpec("tool_calls", "tool calls", "mean", description="tool calls run, up to the submit"),
    )

    def __init__(self, tool_choice: str = "auto") -> None:
        if tool_choice not in ("auto", "required"):
            raise ValueError(f"shop: tool_choice must be 'auto' or 'required', got {tool_choice!r}")
        super().__init__(tool_choice=tool_choice)

    @classmethod
    def default_dataset_path(cls) -> Path:
        return Path(__file__).resolve().with_name("shop.jsonl")  # beside this file: works from any checkout

    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def tool_choice(self) -> str | None:
        return None if self.options["tool_choice"] == "auto" else "required"  # auto: the server's default

    def reset(self, row: dict[str, Any]) -> ShopEpisode:
        return ShopEpisode(row)

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        prices, texts = row.get("prices"), [row.get("id"), row.get("question")]
        numbers = [*prices.values(), row.get("answer")] if isinstance(prices, dict) and prices else [None]
        if any(type(x) not in (int, float) for x in numbers) or any(type(t) is not str or not t for t in texts):
            raise DatasetError(f"{where}: want 'id', 'question' strings; 'prices' {{item: number}}; 'answer' number")

    def prompt_id(self, row: dict[str, Any]) -> str:
        return row["id"]

    def reference(self, row: dict[str, Any]) -> str:
        return f"{float(row['answer']):.2f}"  # to the cent, as `parsed_answer` is

    def prompt_templates(self) -> dict[str, Any]:
        return {"system": SYSTEM}
