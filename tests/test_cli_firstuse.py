"""First use (issue 20, item 1): the kernels' compile is said on stderr, once, with a count; a warm cache says
nothing."""
import io
import os
import subprocess
import sys
from pathlib import Path

import numba
import pytest

from kernels._jit import sources_fingerprint
from npu_sim.cli.firstuse import cache_dir, cache_is_cold, watch
from tests.cli_models import free_width

ROOT = Path(__file__).parent.parent


def test_cold_cache_is_detected(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    assert cache_is_cold(cache)                      # empty
    assert cache_is_cold(tmp_path / "missing")       # no folder yet
    (cache / "add._add_direct-13.py311.nbi").write_bytes(b"")
    assert not cache_is_cold(cache)                  # a compiled kernel: a changed one is said when it compiles
    assert cache_dir().name  # where Numba keeps the kernels' code


def test_a_compile_is_said_once_with_a_count():
    out = io.StringIO()
    with watch(runs=False, stream=out):
        fn = numba.njit(lambda a: a + 1)  # a fresh function: Numba compiles it here, once per signature
        fn(1)
        fn(1.5)
    text = out.getvalue()
    assert text.count("compiling kernels for first use (cached in ") == 1
    assert "compiled 2 kernel(s) in" in text and "later runs reuse them" in text
    quiet = io.StringIO()
    with watch(runs=False, stream=quiet):
        fn(2)  # compiled already: nothing to say
    assert quiet.getvalue() == ""


@pytest.mark.full  # compiles kernels into an empty cache: make test-full
def test_first_run_says_so_then_not(tmp_path):
    model = free_width(tmp_path)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "npu_sim.cli", "run", str(model), "--input-shape", "x=1x3x8x16",
            "--out", str(tmp_path / "o")]
    first = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stderr.startswith(f"compiling kernels for first use (cached in {tmp_path / 'numba'}")
    assert first.stderr.count("compiling kernels") == 1 and "kernel(s) in" in first.stderr
    again = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert again.returncode == 0 and "compil" not in again.stderr, again.stderr


def test_cache_folder_follows_the_kernel_sources(tmp_path):
    """Numba checks a cached kernel against its own file only; the cache folder is named after every kernel
    source, so a change to any of them (e.g. a tile another file inlines) gets compiled afresh."""
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    before = sources_fingerprint(tmp_path)
    (tmp_path / "b.py").write_text("y = 3\n")
    assert sources_fingerprint(tmp_path) != before
    assert f"sources-{sources_fingerprint()}" in str(cache_dir())
