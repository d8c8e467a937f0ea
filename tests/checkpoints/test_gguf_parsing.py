"""The GGUF converter parses the file once and builds gguf's tensor-name map once (transformers would do
each again for the config, the tokenizer and every module): the shared ones are the same objects and read
what a fresh parse reads. Runs in the vLLM runtime, where the converter runs."""

from __future__ import annotations

import json
import subprocess

from tasks.checkpoints.sources import find_default_gguf
from tasks.runtime.scripts import SCRIPTS_DIR
from tasks.runtime.venv import Runtime

CHECK = """
import json, sys
sys.path.insert(0, sys.argv[1])
import gguf
fresh = gguf.GGUFReader(sys.argv[2])
from gguf_to_hf import share_gguf_parsing
share_gguf_parsing()
first, again = gguf.GGUFReader(sys.argv[2]), gguf.GGUFReader(sys.argv[2])
arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == "llama")
print(json.dumps({
    "same_reader": first is again,
    "same_fields": list(first.fields) == list(fresh.fields),
    "same_tensors": [t.name for t in first.tensors] == [t.name for t in fresh.tensors],
    "tensors": len(first.tensors),
    "same_map": gguf.get_tensor_name_map(arch, 30) is gguf.get_tensor_name_map(arch, 30),
}))
"""


def test_the_converter_parses_the_gguf_once(runtime: Runtime) -> None:
    path = find_default_gguf(runtime)
    out = subprocess.run([str(runtime.python), "-c", CHECK, str(SCRIPTS_DIR), str(path)], capture_output=True,
                         text=True, timeout=300, env=runtime.env())  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == {
        "same_reader": True, "same_fields": True, "same_tensors": True, "tensors": 272, "same_map": True,
    }  # fmt: skip
