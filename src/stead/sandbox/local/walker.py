"""glob and grep over a directory tree, run as a child process per search.

A child of its own, not a thread: a model-supplied pattern can make Python's
regex engine backtrack for minutes while holding the GIL, and a child can be
killed (with its whole group) at the deadline or on cancellation. Standard
library only, so it runs as ``python -I -S walker.py`` without stead's imports.

Protocol: one JSON request on stdin; on stdout one JSON value per line — a
string per result, then one object: ``{"total", "walk_limit_hit", "timed_out",
"truncated"}`` when done, ``{"invalid": message}`` for a bad request or
``{"error": message}`` when the search itself failed.
Results are streamed (grep) so a search killed at the deadline keeps them.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

GREP_SKIP_DIRS = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__"})
"""What grep does not go into below its path: version control and installed
dependencies, often far larger than the code they sit beside (the walk's entry
budget would be spent on them before the rest of the tree)."""
_MAGIC = re.compile(r"[*?\[{]")
BINARY_PROBE = 512


class Walk:
    """A depth-first walk in name order that stops at an entry or time budget."""

    def __init__(self, entry_limit: int, deadline: float) -> None:
        self.entry_limit = entry_limit
        self.deadline = deadline
        self.seen = 0
        self.walk_limit_hit = False
        self.timed_out = False

    def expired(self) -> bool:
        if time.monotonic() > self.deadline:
            self.timed_out = True
        return self.timed_out

    def entries(
        self,
        root: str,
        skip: frozenset[str] = frozenset(),
        descend: Callable[[os.DirEntry[str]], bool] | None = None,
    ) -> Iterator[os.DirEntry[str]]:
        """Every entry under ``root`` in path order; symlinked directories are
        listed but not entered, directories named in ``skip`` neither, nor those
        ``descend`` says hold nothing wanted."""
        stack = [_listing(root)]
        while stack:
            if not stack[-1]:
                stack.pop()
                continue
            entry = stack[-1].pop()
            self.seen += 1
            if self.seen > self.entry_limit:
                self.walk_limit_hit = True
                return
            if self.expired():
                return
            if entry.name in skip:
                continue
            yield entry
            if entry.is_dir(follow_symlinks=False) and (descend is None or descend(entry)):
                stack.append(_listing(entry.path))


def _listing(directory: str) -> list[os.DirEntry[str]]:
    """The directory's entries in reverse name order (popped from the end)."""
    try:
        with os.scandir(directory) as listing:
            return sorted(listing, key=lambda e: e.name, reverse=True)
    except OSError:
        return []


def translate(pattern: str) -> str:
    """A doublestar pattern as a regular expression for ``fullmatch`` on a
    ``/``-separated relative path: ``*`` and ``?`` stay inside one segment,
    ``**`` as a whole segment spans any number of them, ``[...]`` and
    ``{a,b}`` as in the shell, ``\\`` escapes the next character."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            whole = (i == 0 or pattern[i - 1] == "/") and (j == n or pattern[j] == "/")
            if j - i >= 2 and whole:
                out.append(".*" if j == n else "(?:.*/)?")
                i = j + 1
            else:
                out.append("[^/]*")
                i = j
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and (close := _class_end(pattern, i)) > 0:
            out.append(_char_class(pattern[i + 1 : close]))
            i = close + 1
        elif c == "{" and (close := _brace_end(pattern, i)) > 0:
            alternatives = _split_top_level(pattern[i + 1 : close])
            out.append("(?:" + "|".join(translate(a) for a in alternatives) + ")")
            i = close + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    i = start + 1
    if i < len(pattern) and pattern[i] in "!^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i if i < len(pattern) else -1


def _char_class(body: str) -> str:
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    chars: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            chars.append("\\" + body[i + 1])
            i += 2
            continue
        chars.append("\\" + c if c in "\\^[]" else c)
        i += 1
    return ("[^/" if negate else "(?!/)[") + "".join(chars) + "]"


def _brace_end(pattern: str, start: int) -> int:
    depth = 0
    i = start
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        depth += c == "{"
        depth -= c == "}"
        if depth == 0:
            return i
        i += 1
    return -1


def _split_top_level(body: str) -> list[str]:
    parts, depth, current, i = [], 0, [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            current.append(body[i : i + 2])
            i += 2
            continue
        if c == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            depth += (c == "{") - (c == "}")
            current.append(c)
        i += 1
    parts.append("".join(current))
    return parts


def glob(request: dict[str, Any], out: TextIO) -> dict[str, Any]:
    pattern = request["pattern"].removeprefix("./")
    matcher = re.compile(translate(pattern), re.DOTALL)
    walk = Walk(request["walk_limit"], time.monotonic() + request["seconds"])
    root, workspace = request["root"], request["workspace"]
    found: list[tuple[float, str]] = []
    wanted = _descent(pattern)
    descend = None if wanted is None else lambda e: wanted(os.path.relpath(e.path, root))
    for entry in walk.entries(root, descend=descend):
        relative = os.path.relpath(entry.path, root).replace(os.sep, "/")
        if not matcher.fullmatch(relative):
            continue
        if entry.is_symlink() and not _inside(os.path.realpath(entry.path), workspace):
            continue
        found.append((_mtime(entry), _shown(entry.path, request)))
    found.sort(key=lambda item: (-item[0], item[1]))
    for _, shown in found[: request["result_limit"]]:
        _emit(out, shown)
    return {"total": len(found), "walk_limit_hit": walk.walk_limit_hit, "timed_out": walk.timed_out}


def _descent(pattern: str) -> Callable[[str], bool] | None:
    """Which directories (paths relative to the root) can hold a match of
    ``pattern``, so the walk enters no other: below leading literal components,
    only those; without ``**``, none deeper than the pattern, and only those
    its components match. None (every one) for a pattern with braces or a
    character class, which may hold a ``/``, or an escape, which a literal
    comparison would read wrong."""
    if any(c in pattern for c in "{[\\"):
        return None
    parts = pattern.split("/")
    deep = any("**" in part for part in parts)
    literal: list[str] = []
    for part in parts[:-1]:
        if _MAGIC.search(part):
            break
        literal.append(part)
    matchers = [re.compile(translate(part), re.DOTALL) for part in parts]

    def descend(relative: str) -> bool:
        for i, name in enumerate(relative.replace(os.sep, "/").split("/")):
            if i < len(literal):
                if name != literal[i]:
                    return False
            elif deep:
                return True
            elif i >= len(parts) - 1 or not matchers[i].fullmatch(name):
                return False
        return True

    return descend


def grep(request: dict[str, Any], out: TextIO) -> dict[str, Any]:
    try:
        matcher = re.compile(request["pattern"])
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        return {"invalid": f"invalid regex: {exc}"}
    walk = Walk(request["walk_limit"], time.monotonic() + request["seconds"])
    budget = [request["output_limit"]]
    root = request["root"]
    if os.path.isfile(root):
        files: Iterator[str] = iter([root])
    else:
        files = (
            e.path for e in walk.entries(root, GREP_SKIP_DIRS) if e.is_file(follow_symlinks=False)
        )
    for path in files:
        if not _grep_file(path, matcher, request, walk, budget, out):
            break
    return {
        "walk_limit_hit": walk.walk_limit_hit,
        "timed_out": walk.timed_out,
        "truncated": budget[0] < 0,
    }


def _grep_file(
    path: str,
    matcher: re.Pattern[str],
    request: dict[str, Any],
    walk: Walk,
    budget: list[int],
    out: TextIO,
) -> bool:
    """Scans one file; False once the output budget or the time is used up."""
    scan_limit, line_length = request["line_scan"], request["line_length"]
    shown = _shown(path, request)
    try:
        with open(path, "rb") as f:
            if b"\x00" in f.read(BINARY_PROBE):
                return True
            f.seek(0)
            number = 0
            while raw := f.readline(scan_limit):
                number += 1
                if len(raw) == scan_limit and not raw.endswith(b"\n"):
                    while (rest := f.readline(scan_limit)) and not rest.endswith(b"\n"):
                        pass
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if matcher.search(text):
                    if len(text) > line_length:
                        text = text[:line_length] + " [line truncated]"
                    line = f"{shown}:{number}:{text}"
                    budget[0] -= len(line.encode("utf-8", errors="replace")) + 1
                    if budget[0] < 0:
                        return False
                    _emit(out, line)
                if number % 256 == 0 and walk.expired():
                    return False
    except OSError:
        pass
    return not walk.expired()


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _mtime(entry: os.DirEntry[str]) -> float:
    try:
        return entry.stat().st_mtime
    except OSError:
        return 0.0


def _shown(path: str, request: dict[str, Any]) -> str:
    relative = os.path.relpath(path, request["workspace"]).replace(os.sep, "/")
    shown: str = request["shown_as"].rstrip("/") or "/"
    return shown if relative == "." else f"{shown.rstrip('/')}/{relative}"


def _emit(out: TextIO, value: object) -> None:
    out.write(json.dumps(value) + "\n")
    out.flush()


def main() -> None:
    request = json.loads(sys.stdin.read())
    try:
        import resource

        cpu = int(request["seconds"]) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    except (ImportError, ValueError, OSError):
        pass
    operation = glob if request["op"] == "glob" else grep
    try:
        status = operation(request, sys.stdout)
    except Exception as exc:  # reported to the parent, which raises it as a SandboxError
        status = {"error": f"{request['op']} failed: {type(exc).__name__}: {exc}"}
    _emit(sys.stdout, status)


if __name__ == "__main__":
    main()
