# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""The package installs with pip from Debian's setuptools, offline, and
carries its type information (py.typed)."""

from __future__ import annotations

import inspect
import pathlib
import shutil
import subprocess
import sys

import pytest

import keylock
import keylock.aio
from conftest import PYDIR, clean_env


def test_pip_install_offline(tmp_path: pathlib.Path) -> None:
    for mod in ("pip", "setuptools", "wheel"):
        if subprocess.run([sys.executable, "-c", f"import {mod}"],
                          capture_output=True).returncode:
            pytest.skip(f"no {mod} for {sys.executable} (python3-pip)")
    # a copy: building writes build/ and *.egg-info next to pyproject.toml
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(PYDIR / "pyproject.toml", src)
    shutil.copy(PYDIR / "README.md", src)
    shutil.copytree(PYDIR / "keylock", src / "keylock",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "lib"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                    "--no-build-isolation", "--no-index", "--no-deps",
                    "--target", str(target), str(src)], check=True,
                   env=clean_env())
    assert (target / "keylock" / "py.typed").exists()
    assert (target / "keylock" / "aio.py").exists()
    env = clean_env()
    env["PYTHONPATH"] = str(target)
    out = subprocess.run(
        [sys.executable, "-c", "import keylock, keylock.aio; "
         "print(keylock.__file__, keylock.__version__)"],
        check=True, capture_output=True, text=True, env=env,
        cwd=tmp_path).stdout
    assert out.startswith(str(target)) and keylock.__version__ in out


def test_every_public_name_has_a_docstring() -> None:
    missing = []
    for mod in (keylock, keylock.aio):
        assert mod.__doc__
        for name in mod.__all__:
            obj = getattr(mod, name)
            if isinstance(obj, type) or inspect.isfunction(obj):
                if not getattr(obj, "__doc__", None):
                    missing.append(f"{mod.__name__}.{name}")
                for attr, member in vars(obj).items() if isinstance(
                        obj, type) else ():
                    if attr.startswith("_") and attr not in (
                            "__enter__", "__aenter__"):
                        continue
                    if callable(member) or isinstance(member, property):
                        if not member.__doc__:
                            missing.append(f"{mod.__name__}.{name}.{attr}")
    assert not missing, missing
