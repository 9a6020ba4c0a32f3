"""The FUNCTION library this package ships (ratelimit.lua, copied into the
wheel and sdist at build time from the repo's functions/ratelimit.lua by
hatch_build.py), its version, and whether a loaded copy is older. No I/O
beyond reading that one file."""

from __future__ import annotations

import functools
import pathlib
import re
from typing import Optional, Tuple

from ._core import BackendMissingError

LIBRARY_NAME = "ratelimit"
ADMIN_COMMAND = "valkey-cli -x FUNCTION LOAD REPLACE < ratelimit.lua"

_HERE = pathlib.Path(__file__).resolve().parent
# Installed: next to this file. In a checkout (PYTHONPATH=clients/python/src):
# the repo's own copy, which the build copies.
_CANDIDATES = (_HERE / "ratelimit.lua", _HERE.parents[3] / "functions" / "ratelimit.lua")
_VERSION = re.compile(r"^local VERSION = '([^']+)'$", re.MULTILINE)


@functools.lru_cache(maxsize=None)
def bundled_source() -> str:
    for path in _CANDIDATES:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    raise BackendMissingError("valkey_ratelimit: ratelimit.lua is missing from the package (a broken install?)")


def source_version(source: str) -> Optional[str]:
    """The version a library's source declares (its rl_version), if any."""
    match = _VERSION.search(source)
    return match.group(1) if match else None


def version_key(version: Optional[str]) -> Tuple[int, ...]:
    """Orders versions; a library without rl_version (None) or with an
    unreadable one is older than any."""
    if version is None or not re.fullmatch(r"[0-9]+(\.[0-9]+)*", version):
        return ()
    return tuple(int(part) for part in version.split("."))


def is_older(loaded: Optional[str], ours: Optional[str]) -> bool:
    return version_key(loaded) < version_key(ours)


def missing(reason: str) -> BackendMissingError:
    return BackendMissingError(
        "the valkey-ratelimit module is not loaded and neither is its FUNCTION library"
        f" ({reason}); an administrator can load the copy this package ships"
        f" ({_CANDIDATES[0].name} in the valkey_ratelimit package) with `{ADMIN_COMMAND}`"
        " (on a cluster, into every primary)"
    )
