"""The mini-hub's repos: files as git and LFS blobs, commits, and the metadata the Hub derives
from them (config, safetensors counts, transformers info, tags)."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_DEFAULT_CREATED_AT = datetime(2024, 1, 1, tzinfo=UTC)

# Files the Hub's default .gitattributes sends to LFS (and GGUF), matched on the file name.
_LFS_PATTERNS = (
    "*.7z *.arrow *.bin *.bz2 *.ckpt *.ftz *.gz *.h5 *.joblib *.lfs.* *.mlmodel *.model *.msgpack"
    " *.npy *.npz *.onnx *.ot *.parquet *.pb *.pickle *.pkl *.pt *.pth *.rar *.safetensors *.tar"
    " *.tar.* *.tflite *.tgz *.wasm *.xz *.zip *.zst *tfevents* *.gguf"
).split()
_LFS_MIN_SIZE = 10 * 1000 * 1000  # the Hub refuses larger regular git files

# The fields `expand` may name (huggingface_hub's ExpandModelProperty_T); others answer 400.

# Keys of config.json / tokenizer_config.json that the Hub exposes in the `config` field.
_HUB_CONFIG_KEYS = ("architectures", "model_type", "auto_map", "quantization_config")
_HUB_TOKENIZER_KEYS = (
    "bos_token",
    "eos_token",
    "pad_token",
    "unk_token",
    "sep_token",
    "cls_token",
    "mask_token",
    "chat_template",
    "use_default_system_prompt",
)
# Architecture suffix -> transformers auto class, for the derived `transformersInfo`.
_AUTO_MODELS = (
    ("ForCausalLM", "AutoModelForCausalLM"),
    ("LMHeadModel", "AutoModelForCausalLM"),
    ("ForMaskedLM", "AutoModelForMaskedLM"),
    ("ForSequenceClassification", "AutoModelForSequenceClassification"),
    ("ForTokenClassification", "AutoModelForTokenClassification"),
    ("ForQuestionAnswering", "AutoModelForQuestionAnswering"),
    ("ForImageClassification", "AutoModelForImageClassification"),
    ("ForSpeechSeq2Seq", "AutoModelForSpeechSeq2Seq"),
)
_CONDITIONAL_GENERATION = {
    "image-text-to-text": "AutoModelForImageTextToText",
    "automatic-speech-recognition": "AutoModelForSpeechSeq2Seq",
}

#: The ``.gitattributes`` the Hub writes into a repo it creates (the LFS patterns above).
GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in _LFS_PATTERNS)

REPO_TYPES = ("model", "dataset", "space")
SPACE_SDKS = ("gradio", "docker", "static", "streamlit")

_HEX = re.compile(r"[0-9a-f]{7,40}")
_FULL_SHA = re.compile(r"[0-9a-f]{40}")


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _as_datetime(value: str | datetime) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _git_oid(data: bytes) -> str:
    """The git blob id of *data* (what the Hub reports as a regular file's oid and ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _is_lfs(path: str, size: int) -> bool:
    name = path.rsplit("/", 1)[-1]
    return size >= _LFS_MIN_SIZE or any(fnmatch.fnmatch(name, p) for p in _LFS_PATTERNS)


@dataclass(frozen=True)
class _Blob:
    """One file's content and the ids the Hub derives from it."""

    data: bytes
    oid: str  # git blob id (of the LFS pointer file for LFS files)
    sha256: str | None  # LFS files only
    pointer_size: int

    @classmethod
    def of(cls, path: str, data: bytes) -> _Blob:
        if not _is_lfs(path, len(data)):
            return cls(data, _git_oid(data), None, 0)
        sha256 = hashlib.sha256(data).hexdigest()
        pointer = (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(data)}\n"
        ).encode()
        return cls(data, _git_oid(pointer), sha256, len(pointer))

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def etag(self) -> str:
        return self.sha256 or self.oid


@dataclass
class _Commit:
    sha: str
    parent: _Commit | None
    files: dict[str, _Blob]
    date: datetime
    title: str
    meta: dict[str, Any] = field(default_factory=dict)  # derived card fields at this commit
    description: str = ""


@dataclass
class _Repo:
    repo_id: str
    pipeline_tag: str | None
    tags: tuple[str, ...]
    downloads: int
    trending_score: int
    likes: int
    gated: bool | str
    library_name: str | None
    created_at: datetime
    # explicit overrides of fields otherwise derived from the files (None: derive)
    config: dict[str, Any] | None
    safetensors_parameters: int | None
    transformers_info: dict[str, Any] | None
    gguf: dict[str, Any] | None
    commits: list[_Commit] = field(default_factory=list)
    order: int = 0
    repo_type: str = "model"  # "model", "dataset" or "space"
    sdk: str | None = None  # a space's
    private: bool = False

    @property
    def prefix(self) -> str:
        """The URL prefix of its type: ``""``, ``"datasets/"`` or ``"spaces/"``."""
        return "" if self.repo_type == "model" else f"{self.repo_type}s/"

    @property
    def head(self) -> _Commit:
        return self.commits[-1]

    def resolve(self, revision: str) -> _Commit | None:
        if revision in ("main", "refs/heads/main"):
            return self.head
        if _HEX.fullmatch(revision):
            found = [c for c in self.commits if c.sha.startswith(revision)]
            if len(found) == 1:
                return found[0]
        return None


def _read_folder(folder: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".cache"))
        for name in sorted(filenames):
            path = Path(dirpath, name)
            files[path.relative_to(folder).as_posix()] = path.read_bytes()
    return files


def _safetensors_counts(data: bytes) -> dict[str, int]:
    """Element counts per dtype from a safetensors header (8-byte LE length, then JSON)."""
    if len(data) < 8:
        return {}
    length = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8 : 8 + length])
    except ValueError:
        return {}
    counts: dict[str, int] = {}
    if not isinstance(header, dict):
        return counts
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        dtype = str(info.get("dtype", "F32"))
        counts[dtype] = counts.get(dtype, 0) + math.prod(int(d) for d in info.get("shape", []))
    return counts


def _json_file(files: Mapping[str, _Blob], path: str) -> dict[str, Any] | None:
    blob = files.get(path)
    if blob is None:
        return None
    try:
        value = json.loads(blob.data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _derive(repo: _Repo, files: Mapping[str, _Blob]) -> dict[str, Any]:
    """The card fields the Hub computes from a commit's files, unless given explicitly."""
    config: dict[str, Any] | None
    if repo.config is not None:
        config = dict(repo.config)
    else:
        raw = _json_file(files, "config.json")
        config = None if raw is None else {k: raw[k] for k in _HUB_CONFIG_KEYS if k in raw}
        tokenizer = _json_file(files, "tokenizer_config.json")
        if tokenizer is not None:
            config = config or {}
            config["tokenizer_config"] = {
                k: tokenizer[k] for k in _HUB_TOKENIZER_KEYS if k in tokenizer
            }

    safetensors: dict[str, Any] | None = None
    if repo.safetensors_parameters is not None:
        n = repo.safetensors_parameters
        safetensors = {"parameters": {"BF16": n}, "total": n}
    else:
        counts: dict[str, int] = {}
        for path, blob in sorted(files.items()):
            if path.endswith(".safetensors"):
                for dtype, n in _safetensors_counts(blob.data).items():
                    counts[dtype] = counts.get(dtype, 0) + n
        if counts:
            safetensors = {"parameters": counts, "total": sum(counts.values())}

    transformers_info = repo.transformers_info
    if transformers_info is None and repo.library_name == "transformers" and config:
        transformers_info = _derive_transformers_info(config, files, repo.pipeline_tag)

    tags: list[str] = []
    if repo.library_name:
        tags.append(repo.library_name)
    if safetensors is not None or any(p.endswith(".safetensors") for p in files):
        tags.append("safetensors")
    if repo.gguf is not None or any(p.endswith(".gguf") for p in files):
        tags.append("gguf")
    if config and isinstance(config.get("model_type"), str):
        tags.append(config["model_type"])
    if repo.pipeline_tag:
        tags.append(repo.pipeline_tag)
    tags.extend(repo.tags)
    if config and config.get("auto_map"):
        tags.append("custom_code")
    return {
        "config": config,
        "safetensors": safetensors,
        "transformersInfo": transformers_info,
        "gguf": repo.gguf,
        "tags": list(dict.fromkeys(tags)),
    }


def _derive_transformers_info(
    config: Mapping[str, Any], files: Mapping[str, _Blob], pipeline_tag: str | None
) -> dict[str, Any] | None:
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures:
        return None
    arch = str(architectures[0])
    auto_model = "AutoModel"
    for suffix, name in _AUTO_MODELS:
        if arch.endswith(suffix):
            auto_model = name
            break
    else:
        if arch.endswith("ForConditionalGeneration"):
            auto_model = _CONDITIONAL_GENERATION.get(pipeline_tag or "", "AutoModelForSeq2SeqLM")
    info: dict[str, Any] = {"auto_model": auto_model}
    auto_map = config.get("auto_map")
    if isinstance(auto_map, dict) and isinstance(auto_map.get(auto_model), str):
        info["custom_class"] = auto_map[auto_model].split("--")[-1]
    if pipeline_tag:
        info["pipeline_tag"] = pipeline_tag
    tokenizer = any(p in files for p in ("tokenizer.json", "tokenizer_config.json"))
    images = any(p in files for p in ("preprocessor_config.json", "processor_config.json"))
    if images:
        info["processor"] = "AutoProcessor" if tokenizer else "AutoImageProcessor"
    elif tokenizer:
        info["processor"] = "AutoTokenizer"
    return info
