"""The kit's PEP 517 build backend: setuptools' own (setuptools.build_meta), with a wheel of its
own where setuptools cannot make one.

setuptools before 70.1 builds wheels only with the separate wheel package installed. A Python
that has setuptools but not wheel (a pyenv or python.org build, a virtualenv made by venv) cannot
then run `pip install --no-build-isolation`, and without network access it cannot fetch wheel
either. There, and only there, this backend asks setuptools for the metadata (egg_info) and the
built modules (build_py) and zips them into a wheel itself: the kit is pure Python, with no
dependencies, entry points or data files to translate. Elsewhere every hook is setuptools'.

Editable installs (pip install -e) need setuptools 70.1 or newer or the wheel package.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import re
import tempfile
import zipfile
from pathlib import Path

import setuptools
from setuptools import build_meta as _setuptools

build_sdist = _setuptools.build_sdist
get_requires_for_build_sdist = _setuptools.get_requires_for_build_sdist

# A fixed time for the wheel's entries, so that the same sources make the same wheel.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _setuptools_builds_wheels() -> bool:
    return (importlib.util.find_spec("wheel") is not None
            or importlib.util.find_spec("setuptools.command.bdist_wheel") is not None)


if _setuptools_builds_wheels():
    get_requires_for_build_wheel = _setuptools.get_requires_for_build_wheel
    prepare_metadata_for_build_wheel = _setuptools.prepare_metadata_for_build_wheel
    build_wheel = _setuptools.build_wheel
    get_requires_for_build_editable = _setuptools.get_requires_for_build_editable
    prepare_metadata_for_build_editable = _setuptools.prepare_metadata_for_build_editable
    build_editable = _setuptools.build_editable
else:
    # No prepare_metadata_for_build_wheel (setuptools' needs wheel): a frontend then takes the
    # metadata from the wheel, as PEP 517 has it. No build_editable either, for the same reason.

    def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
        return []

    def build_wheel(wheel_directory: str, config_settings: dict | None = None,
                    metadata_directory: str | None = None) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            egg_base, lib = Path(tmp, "egg"), Path(tmp, "lib")
            egg_base.mkdir()
            dist = setuptools.setup(script_args=["--quiet", "egg_info", "--egg-base", str(egg_base),
                                                 "build_py", "--build-lib", str(lib)])
            (egg_info,) = egg_base.glob("*.egg-info")
            if (egg_info / "requires.txt").exists() or (egg_info / "entry_points.txt").exists():
                raise RuntimeError("this backend's own wheel carries no dependencies or entry points; "
                                   "install the wheel package to build this project")
            name = re.sub(r"[-_.]+", "_", dist.get_name()).lower()
            version = dist.get_version()
            files = {p.relative_to(lib).as_posix(): p.read_bytes() for p in sorted(lib.rglob("*")) if p.is_file()}
            info = f"{name}-{version}.dist-info"
            files[f"{info}/METADATA"] = (egg_info / "PKG-INFO").read_bytes()
            files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: agentbus_build (setuptools {setuptools.__version__})\n"
                                      "Root-Is-Purelib: true\nTag: py3-none-any\n").encode()
            files[f"{info}/top_level.txt"] = (egg_info / "top_level.txt").read_bytes()
            basename = f"{name}-{version}-py3-none-any.whl"
            _write_wheel(Path(wheel_directory, basename), files, f"{info}/RECORD")
            return basename


def _write_wheel(path: Path, files: dict[str, bytes], record: str) -> None:
    """Writes files and their RECORD (path, SHA-256, size) as a wheel."""
    lines = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append(f"{record},,")
    files = {**files, record: ("\n".join(lines) + "\n").encode()}
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, _ZIP_TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    os.replace(tmp, path)
