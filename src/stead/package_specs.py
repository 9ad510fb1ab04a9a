"""The package managers an environment's ``packages`` may name, and what a
package spec of each must look like.

Shared by the API (which refuses a bad spec with a 400 naming the field) and
the sandbox host (which refuses it again at install, for configs stored before
a rule existed). The rules accept a registry package's name with an optional
version in that ecosystem's own notation, and nothing a shell, an installer's
option parser or a non-registry source (paths, URLs, git) could read
differently: no whitespace, no quotes or ``;&|$`` and no leading ``-``.
"""

from __future__ import annotations

import re

PACKAGE_MANAGERS = ("apt", "cargo", "gem", "go", "npm", "pip")
"""Every ecosystem the API accepts, in the order they are installed."""
MAX_SPECS = 256
"""Specs one manager may list."""
MAX_SPEC_BYTES = 32 * 1024
"""What all of an environment's specs may add up to: they become one install
script, a single argument that Linux caps at 128 KiB."""

_VERSION_OPS = r"(===|==|!=|~=|<=|>=|<|>)"
_PIP_NAME = r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?"
_PIP_EXTRAS = r"\[[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*\]"
_PIP_CLAUSE = rf"{_VERSION_OPS}[A-Za-z0-9.*+!_-]+"
_NPM_PART = r"[A-Za-z0-9][A-Za-z0-9._~-]*"
_GO_ELEMENT = r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*"

_RULES: dict[str, tuple[re.Pattern[str], str]] = {
    "apt": (
        re.compile(r"[a-z0-9][a-z0-9+.-]*[a-z0-9+](:[a-z0-9-]+)?(=[0-9][A-Za-z0-9.+~:-]*)?"),
        "a Debian package name, optionally with :arch and =version (curl, curl=7.88.1-10)",
    ),
    "cargo": (
        re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}(@[0-9A-Za-z.^~=<>*+,-]+)?"),
        "a crate name, optionally with @version (ripgrep, ripgrep@14.1.0)",
    ),
    "gem": (
        re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(:(=|!=|>=|<=|~>|>|<)?[0-9][0-9A-Za-z.-]*)?"),
        "a gem name, optionally with :version (rake, rake:13.0.6)",
    ),
    "go": (
        re.compile(
            rf"[A-Za-z0-9][A-Za-z0-9-]*(\.[A-Za-z0-9-]+)+(/{_GO_ELEMENT})*(@[A-Za-z0-9._+-]+)?"
        ),
        "a Go package path starting with a domain, optionally with @version"
        " (golang.org/x/tools/cmd/goimports@v0.24.0)",
    ),
    "npm": (
        re.compile(rf"(@{_NPM_PART}/)?{_NPM_PART}(@[A-Za-z0-9.^~<>=*+_-]+)?"),
        "a registry package name, optionally with @version (typescript, @scope/name@^1.2)",
    ),
    "pip": (
        re.compile(rf"{_PIP_NAME}({_PIP_EXTRAS})?({_PIP_CLAUSE}(,{_PIP_CLAUSE})*)?"),
        "a project name with optional [extras] and version clauses, no spaces"
        " (numpy, numpy==2.2.0, requests[socks]>=2,<3)",
    ),
}


def spec_problem(manager: str, spec: str) -> str | None:
    """Why ``spec`` is no package spec of ``manager``, or None when it is one."""
    rule = _RULES.get(manager)
    if rule is None:
        return f"{manager!r} is not one of {', '.join(PACKAGE_MANAGERS)}"
    pattern, expected = rule
    if pattern.fullmatch(spec) is None:
        return f"{spec[:80]!r} is not {expected}"
    return None


def specs_problem(packages: dict[str, list[str]]) -> str | None:
    """Why ``packages`` (manager -> specs) lists too much, or None: each
    manager at most ``MAX_SPECS``, all of them ``MAX_SPEC_BYTES`` in all. The
    answer starts with the field under ``packages`` it is about."""
    for manager, specs in packages.items():
        if len(specs or ()) > MAX_SPECS:
            return f"packages.{manager}: at most {MAX_SPECS} packages, not {len(specs)}"
    total = sum(len(s.encode()) for specs in packages.values() for s in specs or ())
    if total > MAX_SPEC_BYTES:
        return f"packages: at most {MAX_SPEC_BYTES} bytes of specs in all, not {total}"
    return None


def packages_problem(packages: dict[str, list[str]]) -> str | None:
    """Why ``packages`` (manager -> specs) is no list stead installs, or None:
    a manager it does not know, a spec no rule takes (``spec_problem``), or a
    list too long (``specs_problem``). The answer starts with the field under
    ``packages`` it is about; the API and the sandbox host both ask."""
    for manager, specs in packages.items():
        if specs and manager not in PACKAGE_MANAGERS:
            return f"packages.{manager}: not a package manager"
        for i, spec in enumerate(specs or ()):
            if problem := spec_problem(manager, spec):
                return f"packages.{manager}.{i}: {problem}"
    return specs_problem(packages)
