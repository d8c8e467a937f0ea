"""What model preparation writes down: the plan the dry run shows, the options and inputs a conversion's
key covers, and the markers that make a cache entry complete (written last, read on every lookup).

All are JSON on disk or in the run record, so all refuse unknown fields. Every marker evalflow has
written still loads: `ConversionMarker` since the first DCP conversions, `FirstMarker` before them
(its GGUF entries keep their keys, so they stay hits). Markers are written as before, byte for byte:
`entries.write_marker` dumps these models with sorted keys.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, TypeAdapter, model_serializer

from tasks.checkpoints.entries import MarkerFile
from tasks.checkpoints.hashing import MARKER
from tasks.checkpoints.results import DcpConversion, GgufConversion


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- what a conversion's key covers ---------------------------------------------------------------


class GgufOptions(_Record):
    converter: str  # the converter's version
    dtype: str


class DcpOptions(_Record):
    converter: str  # "dcp-<version>"
    dtype: str
    max_shard_bytes: int


class GgufInputs(_Record):
    gguf: dict[str, str]  # file name -> sha256


class DcpInputs(_Record):
    weights: dict[str, str]  # file name -> sha256, per folder
    config: dict[str, str]
    tokenizer: dict[str, str]


# --- the plan (`evalflow prepare --dry-run`, the model section of `evalflow run --dry-run`) -------------


class GgufConversionPlan(_Record):
    converter: Literal["gguf"]
    bytes: int
    options: GgufOptions
    gguf: str


class DcpConversionPlan(_Record):
    converter: Literal["dcp"]
    bytes: int
    options: DcpOptions
    weights_dir: str
    config_dir: str
    tokenizer_dir: str
    policy_model_name: str | None


class DownloadPlan(_Record):
    """A remote source's needed files and their copy in the cache (folder None: not downloaded yet)."""

    url: str
    files: int
    bytes: int
    key: str
    cached: bool
    folder: str | None


class FolderCheck(_Record):
    """What the quick look at an HF folder found (light_check.check_hf_folder)."""

    architecture: str | None
    tensors: int
    dtypes: list[str]
    chat_template: bool


Cache = Literal["hit", "miss", "forced", "n/a", "unknown"]
SECTIONS = ("layout", "download", "light_check", "key", "convert")  # shown only where they apply


class ModelPlan(_Record):
    """What preparing the model would do. `model_dump()` is the plan as printed: a section that does not
    apply is left out, while target and fingerprint are always there (null until known)."""

    source: str
    dtype: str
    force: bool
    skip: bool
    kind: str
    served_name: str
    layout: str | None = None  # DCP sources: which NeMo RL layout
    download: DownloadPlan | None = None  # remote sources
    action: str
    cache: Cache
    target: str | None  # what vLLM is given (None until a download or fetch)
    fingerprint: str | None  # None while unknown
    light_check: FolderCheck | None = None  # served folders
    key: str | None = None  # conversions
    convert: GgufConversionPlan | DcpConversionPlan | None = None  # conversions

    @model_serializer(mode="wrap")
    def _leave_out_absent_sections(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        data: dict[str, object] = handler(self)
        for name in SECTIONS:
            if data.get(name) is None:
                del data[name]
        return data


# --- markers ----------------------------------------------------------------------------------------


class ConvertedBy(_Record):
    pid: int
    host: str


class ConversionMarker(_Record):
    """evalflow-model.json in a converted folder."""

    architecture: str
    parameters: int
    dtype: str
    files: list[str]
    fingerprint: str  # of the served files: the model's identity in rollout cache keys
    kind: str
    source: str
    key: str
    options: GgufOptions | DcpOptions
    inputs: GgufInputs | DcpInputs
    source_bytes: int
    seconds: float
    converter: GgufConversion | DcpConversion  # what the converter script reported
    converted_by: ConvertedBy
    created: float


class FirstMarker(_Record):
    """evalflow-model.json as evalflow's first GGUF converter wrote it (no key, no inputs)."""

    architecture: str
    parameters: int
    dtype: str
    files: list[str]
    fingerprint: str
    source: str
    options: GgufOptions
    created: float

    @property
    def key(self) -> None:
        return None


_CONVERSION_MARKERS: TypeAdapter[ConversionMarker | FirstMarker] = TypeAdapter(ConversionMarker | FirstMarker)
CONVERTED: MarkerFile[ConversionMarker | FirstMarker] = MarkerFile(MARKER, _CONVERSION_MARKERS.validate_json)


class DownloadMarker(_Record):
    """.evalflow-download.json in a downloaded copy of a remote source."""

    url: str
    files: dict[str, tuple[int, str]]  # relative path -> (size, ETag or modification time)
    bytes: int
    seconds: float
    created: float
