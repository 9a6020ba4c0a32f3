"""Build hook: ships the FUNCTION library in the wheel and the sdist.

The repo keeps one copy, functions/ratelimit.lua; a build from the
checkout takes it from there (into valkey_ratelimit/ratelimit.lua in the
wheel, src/valkey_ratelimit/ratelimit.lua in the sdist). A wheel built from
the sdist finds it already in the package directory."""

from __future__ import annotations

import pathlib

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class BundleLibrary(BuildHookInterface):
    PLUGIN_NAME = "bundle-library"

    def initialize(self, version: str, build_data: dict) -> None:
        root = pathlib.Path(self.root)
        repo_copy = root.parent.parent / "functions" / "ratelimit.lua"
        in_package = root / "src" / "valkey_ratelimit" / "ratelimit.lua"
        if repo_copy.is_file():
            target = "valkey_ratelimit/ratelimit.lua" if self.target_name == "wheel" else "src/valkey_ratelimit/ratelimit.lua"
            build_data["force_include"][str(repo_copy)] = target
        elif not in_package.is_file():
            raise FileNotFoundError(f"neither {repo_copy} nor {in_package}: the FUNCTION library cannot be bundled")
