"""The rollout browser's data: the stratified sample, transcripts as turns, the size budget and escaping."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from core.store import Store
from tasks.analysis.metrics import compute_metrics
from tasks.reporting import browser
from tasks.reporting.browser import browser_page, load_rollouts, render_browser
from tasks.reporting.report import write_report
from tests.tasks.conftest import run_info

EVIL = "</script><script>alert(1)</script>"


def grid(make_rollout: Callable[..., dict], prompts: int, repeats: int, **extra: Any) -> list[dict[str, Any]]:
    """prompts x repeats gsm8k rollouts; a prompt's repeats alternate correct/wrong on odd prompts only."""
    rows = []
    for p in range(prompts):
        for r in range(repeats):
            ok = p % 2 == 0 or r % 2 == 0
            rows.append(make_rollout(prompt_id=f"p{p:03d}", repeat=r, success=ok, reward=float(ok), **extra))
    return rows


def sample(files: list[str], store: Store, monkeypatch: pytest.MonkeyPatch, n: int) -> list[tuple[str, int]]:
    monkeypatch.setattr(browser, "MAX_SAMPLE", n)
    frame = load_rollouts(files, store, dedupe=True)
    return list(zip(frame["prompt_id"].to_list(), frame["repeat"].to_list(), strict=True))


def test_sample_covers_every_prompt_and_both_outcomes(make_rollout, write_batch, local_store, monkeypatch) -> None:
    files = [write_batch(grid(make_rollout, 30, 10))]  # 300 rollouts
    picked = sample(files, local_store, monkeypatch, 90)
    assert len(picked) == 90 and len(set(picked)) == 90
    assert {p for p, _ in picked} == {f"p{p:03d}" for p in range(30)}  # the first 90 by id would be 9 prompts
    frame = load_rollouts(files, local_store, dedupe=True)
    mixed = frame.filter(frame["prompt_id"].str.slice(3).cast(int) % 2 == 1)
    # 3 rollouts per prompt (fewer specials): a prompt with mixed results shows a correct and a wrong one
    assert mixed.group_by("prompt_id").agg(n=browser.pl.col("success").n_unique())["n"].to_list() == [2] * 15


def test_sample_keeps_errors_and_extreme_rewards(make_rollout, write_batch, local_store, monkeypatch) -> None:
    rows = grid(make_rollout, 100, 4)
    for i, row in enumerate(rows):
        row["reward"] = (i * 37 % 101) / 100  # distinct rewards
    for i in (5, 222, 397):
        rows[i].update(error="ReadTimeout: slow", completion=None, transcript=None)
    rows[300]["reward"], rows[301]["reward"] = 50.0, -50.0
    picked = sample([write_batch(rows)], local_store, monkeypatch, 20)  # fewer than the 100 prompts
    assert len(picked) == 20
    wanted = {(rows[i]["prompt_id"], rows[i]["repeat"]) for i in (5, 222, 397, 300, 301)}
    assert wanted <= set(picked)
    ids = sorted(int(p[1:]) for p, _ in picked)
    assert ids[0] < 20 and ids[-1] >= 80  # spread over the benchmark, not its first prompts


def test_sample_is_deterministic_and_deduplicated(make_rollout, write_batch, local_store, monkeypatch) -> None:
    rows = grid(make_rollout, 20, 5)
    first = write_batch(rows[:50])
    second = write_batch(rows[50:])
    stale = write_batch([{**rows[0], "completion": "old"}], name="stale.parquet")
    newer = {**rows[0], "completion": "new", "created_at": rows[0]["created_at"].replace(year=2026)}
    fresh = write_batch([newer], name="fresh.parquet")
    picked = sample([first, second, stale, fresh], local_store, monkeypatch, 100)
    assert len(picked) == len(set(picked)) == 100
    assert picked == sample([fresh, second, stale, first], local_store, monkeypatch, 100)
    frame = load_rollouts([first, second, stale, fresh], local_store, dedupe=True)
    assert frame.filter((frame["prompt_id"] == "p000") & (frame["repeat"] == 0))["completion"].to_list() == ["new"]


def tetris_transcript() -> list[dict[str, Any]]:
    call = {
        "id": "call_7",
        "type": "function",
        "function": {"name": "step", "arguments": '{"actions":["Left","Down"]}'},
    }
    return [
        {"role": "system", "content": "You play Tetris."},
        {"role": "user", "content": "New game: the board is 5 columns wide."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_7", "content": "Applied 2 action(s).\n\nBoard:\n_XX__\n_XX__\n#_###"},
        {"role": "assistant", "content": "<answer>Left || Down</answer>"},
    ]


def page_of(rows: list[dict[str, Any]], write_batch, store: Store) -> tuple[dict[str, Any], Any]:
    files = [write_batch(rows)]
    run = compute_metrics(files, store)
    view = browser_page("run", run, load_rollouts(files, store, dedupe=True))
    return view.data, view


def test_transcripts_become_turns(make_rollout, write_batch, local_store) -> None:
    rows = [
        make_rollout(benchmark="tetris", prompt_id=f"g{g}", transcript=tetris_transcript(), tool_calls=1, turns=2,
                     info={"final_board": "_____\n#_###", "cleared_rows": 0})
        for g in range(3)
    ]  # fmt: skip
    rows.append(make_rollout(prompt_id="plain", messages=json.dumps("Q: 1+1?\nA:"), completion=" 2"))
    rows.append(make_rollout(prompt_id="failed", completion=None, error="APIStatusError: context too long"))
    rows.append(make_rollout())  # single turn, no transcript: the messages sent plus the completion
    data, _ = page_of(rows, write_batch, local_store)
    texts = data["texts"]
    by_prompt = {r["p"]: r for r in data["rows"]}
    game = by_prompt["g0"]
    assert [t["role"] for t in game["m"]] == ["system", "user", "assistant", "tool", "assistant"]
    call = game["m"][2]["calls"][0]
    assert (
        call["id"] == "call_7"
        and call["name"] == "step"
        and json.loads(texts[call["args"]]) == {"actions": ["Left", "Down"]}
    )
    assert game["m"][3]["id"] == "call_7" and texts[game["m"][3]["x"]].endswith("#_###")
    assert texts[game["fb"]] == "_____\n#_###" and json.loads(texts[game["i"]])["cleared_rows"] == 0
    assert texts.count("You play Tetris.") == 1  # 3 games, one copy of the shared system prompt
    plain = by_prompt["plain"]
    assert [(t["role"], texts[t["x"]]) for t in plain["m"]] == [("prompt", "Q: 1+1?\nA:"), ("completion", " 2")]
    failed = by_prompt["failed"]
    assert failed["o"] == "error" and failed["w"] == 0.0 and texts[failed["e"]].startswith("APIStatusError")
    assert [t["role"] for t in failed["m"]] == ["user"]  # the messages sent; no completion
    assert by_prompt["p0"]["o"] == "correct" and [t["role"] for t in by_prompt["p0"]["m"]] == ["user", "assistant"]


def test_page_size_is_bounded(make_rollout, write_batch, local_store, monkeypatch) -> None:
    long = "y" * 50_000
    rows = [make_rollout(prompt_id=f"p{p}", completion=f"{p} {long}") for p in range(20)]
    monkeypatch.setattr(browser, "MAX_BENCHMARK_BYTES", 30_000)
    data, view = page_of(rows, write_batch, local_store)
    assert len(data["rows"]) == 8  # each row ~4 KB (its completion clipped to MAX_TEXT_CHARS) until 30 KB
    assert all(len(t) < browser.MAX_TEXT_CHARS + 100 for t in data["texts"])
    assert "clipped (50,003 characters" in data["texts"][data["rows"][0]["m"][1]["x"]]
    assert "12 more sampled rollouts left out" in " ".join(view.benchmarks[0]["notes"])


def test_model_text_stays_inert_in_the_page(make_rollout, write_batch, local_store) -> None:
    files = [write_batch([make_rollout(completion=f"x {EVIL}", parsed_answer=EVIL, error=None)])]
    run = compute_metrics(files, local_store)
    html = render_browser(f"title {EVIL}", run, load_rollouts(files, local_store, dedupe=True))
    assert EVIL not in html and "alert(1)" in html  # present, but only escaped
    assert len(re.findall(r"<script", html)) == 2 and len(re.findall(r"</script>", html)) == 2  # data + code
    raw = re.search(r'<script type="application/json" id="browser-data">(.*?)</script>', html, re.S).group(1)
    assert "<" not in raw and f"x {EVIL}" in json.loads(raw)["texts"]
    assert "plotly" not in html.lower()


def test_report_links_each_benchmark_to_the_browser(make_rollout, write_batch, local_store) -> None:
    rows = [*grid(make_rollout, 4, 3), make_rollout(benchmark="tetris", prompt_id="g0", reference=None)]
    files = [write_batch(rows)]
    urls = write_report(
        local_store.path("run"), compute_metrics(files, local_store), run_info(run_id="r"), files, local_store
    )
    html = local_store.read_text(urls["html"])
    assert '<a href="rollouts.html#b=gsm8k">Browse the rollouts</a>' in html
    assert "12 of 12 rollouts over 4\nof 4 prompts" in html
    assert '<a href="rollouts.html#b=tetris">' in html
