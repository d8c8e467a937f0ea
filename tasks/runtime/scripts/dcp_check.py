"""A DCP checkpoint's `.metadata` read and compared with its shard files, no tensor loaded: the dry run
and the plan refuse a missing, truncated or unreadable piece in seconds, as the conversion would later.

`python dcp_check.py WEIGHTS_DIR` inside the vLLM runtime (torch reads the metadata)."""

from __future__ import annotations

from typing import TypedDict

from _runtime_io import Failure, run_main  # sibling modules: this file runs as a script
from dcp_to_hf import check_shards, read_metadata


class DcpCheck(TypedDict):
    """The result (evalflow reads it as results.DcpCheck: keep the two in step)."""

    bytes: int
    tensors: int


def main(argv: list[str]) -> DcpCheck:
    if len(argv) != 1:
        raise Failure("usage: dcp_check.py WEIGHTS_DIR")
    metadata = read_metadata(argv[0])
    return DcpCheck(bytes=check_shards(argv[0], metadata), tensors=len(metadata.state_dict_metadata))


if __name__ == "__main__":
    run_main(main)
