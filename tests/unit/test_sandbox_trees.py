"""``sandbox_host.trees.remove_tree``: removes what a sandbox wrote, however
deep, without following a symlink out of it."""

from __future__ import annotations

import os
from pathlib import Path

from stead.sandbox_host.trees import remove_tree


def deep(top: Path, levels: int) -> None:
    """A chain of ``levels`` directories under ``top``, past any path length
    (as ``mkdir d && cd d`` in a loop makes it)."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def test_a_tree_thousands_of_levels_deep_is_removed(tmp_path: Path) -> None:
    deep(tmp_path / "tmp", 3000)
    remove_tree(tmp_path / "tmp")
    assert list(tmp_path.iterdir()) == []


def test_a_symlink_is_removed_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "kept").write_bytes(b"1")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "link").symlink_to(outside)
    (tree / "a" / "file-link").symlink_to(outside / "inner" / "kept")
    (tmp_path / "top-link").symlink_to(outside)
    remove_tree(tree)
    remove_tree(tmp_path / "top-link")
    assert not tree.exists() and not (tmp_path / "top-link").exists()
    assert (outside / "inner" / "kept").read_bytes() == b"1"


def test_names_it_moves_entries_up_to_may_be_taken_already(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for n in range(3):
        (tree / f".stead-removing-{n}" / "x" / "y").mkdir(parents=True)
        (tree / "sub" / f".stead-removing-{n}" / "z").mkdir(parents=True)
    (tree / ".stead-removing-3").write_bytes(b"file")
    remove_tree(tree)
    assert not tree.exists()


def test_relative_to_a_directory_a_file_or_nothing(tmp_path: Path) -> None:
    (tmp_path / "tree" / "a").mkdir(parents=True)
    (tmp_path / "file").write_bytes(b"1")
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree("tree", dir_fd=parent)
        remove_tree("file", dir_fd=parent)
        remove_tree("missing", dir_fd=parent)
    finally:
        os.close(parent)
    assert list(tmp_path.iterdir()) == []
