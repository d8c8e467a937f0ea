"""A small thinking model for the reasoning tests: SmolLM2-135M-Instruct with `<think>` and `</think>` added.

vLLM's think-tag reasoning parsers (deepseek_r1; qwen3, which also counts reasoning tokens and drives
`thinking_token_budget`) need both tags as single vocabulary tokens, and SmolLM2's 49,152-token vocabulary has
neither. `thinking_model` derives a copy of the converted SmolLM2 HF folder that has them:

- the tags are added tokens 49152 and 49153, NON-special (as in Qwen3), so a detokenisation that skips special
  tokens keeps them: tokenizer.json `added_tokens` and tokenizer_config.json `added_tokens_decoder` agree;
- the embeddings grow by two rows, and SmolLM2's tied embeddings are untied for it (lm_head.weight, the base's
  embedding matrix, becomes a tensor of its own), because the two sides want different rows:
  - output side: the MEAN of the existing rows, as transformers' `resize_token_embeddings` does: a mean row's
    logit is the hidden state against the average token, so a tag gets about an average token's probability
    (Hewitt 2021; ~3e-9 here) and the model's own text is the base's, never a tag it was not made to write;
  - input side: copies of the rows of "<" and ">". With mean rows there (the first build) the model answers
    every prompt holding a tag with <|im_end|> at once, so an opened or emptied think block gave no text;
    copied rows read as punctuation it knows. Tied, a copied row would tie that token's logit exactly and
    leave greedy decoding to a rounding: on transformers a copy of ":" wrote `</think>` for ":" unprompted.
  The model never learnt the tags: the tests force them (structured outputs, the thinking budget, the chat
  template) and do not expect it to think;
- config.json `vocab_size` and `tie_word_embeddings` follow; the weights stay bf16 safetensors like the base's;
- configs/chat_templates/smollm2_think.jinja is the folder's chat template (SmolLM2's own plus Qwen3-style
  `enable_thinking` and a DeepSeek-R1-style `open_think` at the generation prompt).

The folder is built once per base and builder under `out_root`, named by a hash of the base's weights,
tokenizer and config files, the template and `_BUILD` (the surgery, run in the vLLM runtime's Python: the
orchestrator venv has no torch), under a file lock, in a temporary folder renamed into place when complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from filelock import FileLock

from tasks.runtime.venv import Runtime, ensure_runtime

REPO_ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = REPO_ROOT / "configs" / "chat_templates" / "smollm2_think.jinja"
THINK_START, THINK_END = "<think>", "</think>"
MARKER = "thinking-model.json"  # written last, before the rename: a folder with it is complete
HASHED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
BUILD_TIMEOUT_S = 900

# Runs in the runtime's Python: argv = base folder, folder to fill, chat template. Prints one JSON line.
_BUILD = r"""
import json, shutil, sys, time
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer

TAGS = ("<think>", "</think>")
OWN = {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "evalflow-model.json"}
base, dest, template = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
started = time.monotonic()

config = json.loads((base / "config.json").read_text())
vocab = config["vocab_size"]
tied = config.get("tie_word_embeddings", False)

# Tokenizer: the tags as non-special added tokens, ids vocab and vocab + 1.
tok = Tokenizer.from_file(str(base / "tokenizer.json"))
assert tok.get_vocab_size(with_added_tokens=True) == vocab, (tok.get_vocab_size(with_added_tokens=True), vocab)
assert all(tok.token_to_id(t) is None for t in TAGS), "the base already has the tags"
tok.add_tokens([AddedToken(t, single_word=False, lstrip=False, rstrip=False, normalized=False, special=False)
                for t in TAGS])
ids = [tok.token_to_id(t) for t in TAGS]
assert ids == [vocab, vocab + 1], ids
tok.save(str(dest / "tokenizer.json"))
added = json.loads((dest / "tokenizer.json").read_text())["added_tokens"]
tok_config = json.loads((base / "tokenizer_config.json").read_text())
tok_config["added_tokens_decoder"] = {
    str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
    for a in added
}
tok_config.pop("chat_template", None)  # the template is chat_template.jinja
(dest / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False) + "\n")
shutil.copyfile(template, dest / "chat_template.jinja")

# Weights: two more rows. Input side: copies of the rows of "<" and ">", a token the model knows (a mean row
# makes it end its turn at once). Output side: the mean of the existing rows (Hewitt 2021; transformers'
# resize_token_embeddings): about an average token's probability, so the model never writes a tag itself. A tied
# base is untied for that: lm_head.weight becomes a tensor of its own (its old rows the base's embeddings).
INPUT_LIKE = {"<think>": "<", "</think>": ">"}
like = [tok.token_to_id(INPUT_LIKE[t]) for t in TAGS]
assert all(i is not None and i < vocab for i in like), like

def grow(w, rows):
    assert w.shape[0] == vocab, (tuple(w.shape), vocab)
    return torch.cat([w, rows.to(w.dtype)]).contiguous()

def mean_rows(w):
    return w.float().mean(dim=0, keepdim=True).expand(len(TAGS), -1)

grown, total = [], 0
for f in sorted(base.glob("*.safetensors")):
    with safe_open(str(f), "pt") as fh:
        metadata = fh.metadata() or {"format": "pt"}
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    embed = tensors.get("model.embed_tokens.weight")
    if embed is not None:
        if tied:
            assert "lm_head.weight" not in tensors
            tensors["lm_head.weight"] = grow(embed.clone(), mean_rows(embed))
            grown.append("lm_head.weight (untied)")
        tensors["model.embed_tokens.weight"] = grow(embed, embed[like])
        grown.append("model.embed_tokens.weight")
    if not tied and "lm_head.weight" in tensors:
        tensors["lm_head.weight"] = grow(tensors["lm_head.weight"], mean_rows(tensors["lm_head.weight"]))
        grown.append("lm_head.weight")
    save_file(tensors, str(dest / f.name), metadata=metadata)
    total += sum(t.numel() * t.element_size() for t in tensors.values())
assert "model.embed_tokens.weight" in grown and (tied or "lm_head.weight" in grown), (tied, grown)
index = base / "model.safetensors.index.json"
if index.exists():
    data = json.loads(index.read_text())
    data.setdefault("metadata", {})["total_size"] = total
    (dest / index.name).write_text(json.dumps(data, indent=2) + "\n")
config["vocab_size"] = vocab + len(TAGS)
config["tie_word_embeddings"] = False
(dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
for f in base.iterdir():
    if f.is_file() and f.name not in OWN and not (dest / f.name).exists():
        shutil.copyfile(f, dest / f.name)
built = time.monotonic() - started

# Checks, with transformers as vLLM reads the folder: single-token tags kept by skip_special_tokens, other
# text tokenised as before, the template's switches, the model loading untied with the new rows, and its greedy
# text on an ordinary prompt (recorded, beside the base's: the same unless a near-tie rounds the other way).
from transformers import AutoModelForCausalLM, AutoTokenizer

new, old = AutoTokenizer.from_pretrained(str(dest)), AutoTokenizer.from_pretrained(str(base))
enc = new.encode("<think>x</think>", add_special_tokens=False)
assert len(enc) == 3 and enc[0] == ids[0] and enc[2] == ids[1], enc
assert [new.encode(t, add_special_tokens=False) for t in TAGS] == [[i] for i in ids]
assert new.decode(enc, skip_special_tokens=True) == "<think>x</think>", new.decode(enc, skip_special_tokens=True)
assert not set(TAGS) & set(new.all_special_tokens), new.all_special_tokens
assert new.decode(new.encode("<|im_end|>", add_special_tokens=False), skip_special_tokens=True) == ""
assert len(new) == vocab + len(TAGS), len(new)
text = "Tom has 3 apples and buys 4 more.\nHow many? <|im_end|> think </ think> #### 7"
assert new.encode(text, add_special_tokens=False) == old.encode(text, add_special_tokens=False)
msgs = [{"role": "user", "content": "Hi"}]
plain = old.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
assert new.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == plain
assert new.apply_chat_template(msgs + [{"role": "assistant", "content": "Hello"}], tokenize=False) == \
    old.apply_chat_template(msgs + [{"role": "assistant", "content": "Hello"}], tokenize=False)
off = new.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
assert off == plain + "<think>\n\n</think>\n\n", off
opened = new.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, open_think=True)
assert opened == plain + "<think>\n", opened

model = AutoModelForCausalLM.from_pretrained(str(dest), dtype=torch.bfloat16)
emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
assert tuple(emb.shape) == tuple(head.shape) == (vocab + len(TAGS), config["hidden_size"]), tuple(emb.shape)
assert emb.data_ptr() != head.data_ptr(), "embeddings still tied"
assert torch.equal(emb[vocab:], emb[like]) and torch.equal(head[vocab], head[vocab + 1])
prompt = new(plain, return_tensors="pt", add_special_tokens=False)
greedy = []
for m in (model, AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.bfloat16)):
    with torch.no_grad():
        out = m.generate(**prompt, max_new_tokens=8, do_sample=False)
    greedy.append(new.decode(out[0, prompt["input_ids"].shape[1]:]))
print(json.dumps({"tokens": dict(zip(TAGS, ids)), "vocab_size": vocab + len(TAGS), "base_tied": tied,
                  "input_rows_from": INPUT_LIKE, "output_rows": "mean", "grown": grown,
                  "surgery_s": round(built, 2), "seconds": round(time.monotonic() - started, 2),
                  "greedy": greedy[0], "greedy_matches_base": greedy[0] == greedy[1]}))
"""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_key(base: Path) -> str:
    """Hash of what the derived folder is made from: the base's weights, tokenizer and config files, the chat
    template, and the builder's source."""
    files = sorted([*(base / n for n in HASHED if (base / n).exists()), *base.glob("*.safetensors")])
    if not any(f.suffix == ".safetensors" for f in files):
        raise FileNotFoundError(f"{base} has no safetensors weights")
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\0{_sha256(f)}\0".encode())
    h.update(TEMPLATE.read_bytes() + b"\0" + _BUILD.encode())
    return h.hexdigest()[:16]


def thinking_model(base: Path, out_root: Path, runtime: Runtime | None = None) -> Path:
    """The HF folder of `base` with `<think>` and `</think>` added (see the module docstring), built once
    under `out_root` (concurrent callers wait on a file lock) and returned."""
    base, out_root = Path(base), Path(out_root)
    dest = out_root / f"{base.name}-think_{build_key(base)}"
    if (dest / MARKER).exists():
        return dest
    out_root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_root / f".{dest.name}.lock")):
        if (dest / MARKER).exists():
            return dest
        rt = runtime or ensure_runtime("auto")
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=out_root))
        try:
            tmp.chmod(0o755)  # mkdtemp's 0700, as the converted checkpoints are not
            started = time.monotonic()
            env = {**rt.env(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            proc = subprocess.run(
                [str(rt.python), "-c", _BUILD, str(base), str(tmp), str(TEMPLATE)],
                capture_output=True, text=True, env=env, timeout=BUILD_TIMEOUT_S,
            )  # fmt: skip
            if proc.returncode != 0:
                raise RuntimeError(f"building the thinking model from {base} failed:\n{proc.stderr[-4000:]}")
            report = json.loads(proc.stdout.strip().splitlines()[-1])
            report.update(base=str(base), key=dest.name.rsplit("_", 1)[1],
                          build_s=round(time.monotonic() - started, 2))  # fmt: skip
            (tmp / MARKER).write_text(json.dumps(report, indent=2) + "\n")
            if dest.exists():  # a folder without the marker: not ours to trust
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
