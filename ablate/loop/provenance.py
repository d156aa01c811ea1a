"""The code a cell ran (code.json): the git commit of the ablate checkout, whether it had
uncommitted changes and a hash of them, and the versions of the key packages, so that an
analysis can name arms that ran on different code (analysis/provenance.py)."""
from __future__ import annotations

import json
from pathlib import Path

import ablate
from ablate.loop.outputs import CellDir

CODE_PACKAGES = ("torch", "transformers", "deepspeed", "peft", "vllm")
_UNTRACKED_HASHED_BYTES = 1 << 20   # an untracked file larger than this: name and size only


def code_provenance(root: str | Path | None = None) -> dict:
    """The code this process runs, as code.json records it: the git commit of the ablate
    checkout, whether it has changes (tracked or untracked, not ignored), a SHA-256 of
    `git diff HEAD` and of the untracked files (two dirty runs with the same hash ran the
    same code), ablate's version and the versions of the key packages installed. Without
    git or outside a checkout of ablate (an installed wheel) commit, dirty and diff_sha256
    are null: never an error."""
    import importlib.metadata
    import platform

    root = Path(ablate.__file__).resolve().parents[1] if root is None else Path(root)
    packages = {}
    for name in CODE_PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {**_git_state(root), "ablate": getattr(ablate, "__version__", None),
            "python": platform.python_version(), "packages": packages}


def _git(root: Path, *args) -> bytes | None:
    import subprocess
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _git_state(root: Path) -> dict:
    """commit, dirty and diff_sha256 of the checkout at `root` (null where not one)."""
    import hashlib
    state = {"commit": None, "dirty": None, "diff_sha256": None}
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top.decode().strip()).resolve() != root.resolve():
        return state
    head = _git(root, "rev-parse", "HEAD")
    state["commit"] = head.decode().strip() if head else None
    diff = _git(root, "diff", "HEAD", "--binary")
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z")
    if diff is None or untracked is None:
        return state
    h = hashlib.sha256(diff)
    names = sorted(n for n in untracked.split(b"\0") if n)
    for name in names:
        f = root / name.decode(errors="surrogateescape")
        h.update(b"\0" + name + b"\0")
        try:
            size = f.stat().st_size
            h.update(f.read_bytes() if size <= _UNTRACKED_HASHED_BYTES else str(size).encode())
        except OSError:
            pass
    state["dirty"] = bool(diff) or bool(names)
    state["diff_sha256"] = h.hexdigest() if state["dirty"] else None
    return state


def record_code(cell: CellDir) -> dict:
    """Write code.json: the code of the cell's first start; a resume on other code adds
    its record under `resumed_with` (analysis names such a cell: it mixes code versions)."""
    now = code_provenance()
    path = cell.path / "code.json"
    try:
        first = json.loads(path.read_text()) if path.exists() else None
    except (OSError, ValueError):
        first = None
    if first is None:
        record = now
    else:
        record = first
        seen = [{k: v for k, v in first.items() if k != "resumed_with"},
                *first.get("resumed_with", [])]
        if now not in seen:
            record = {**first, "resumed_with": [*first.get("resumed_with", []), now]}
    cell.write_text("code.json", json.dumps(record, indent=2))
    return record
