"""A folder of wheels for the project's pins (setup.cfg install_requires), its build
backend (pyproject.toml) and their dependencies, for another Python version and
platform, to install on a machine with no network beside the CUDA torch its image
already has (docs/gpu.md, section 1).

    python scripts/offline_wheels.py wheels/ --python-version 3.12 \\
        --platform manylinux_2_28_x86_64 [--skip "torch numpy scipy pandas matplotlib"] \\
        [--have image-freeze.txt]
    # on the offline machine (its python3 holds the CUDA torch):
    python3 -m pip install --no-index --find-links wheels/ --no-deps wheels/*.whl
    python3 -m pip install --no-index --no-deps --no-build-isolation -e .
    python3 -m pip check

Binary wheels come from `pip download --only-binary=:all: --no-deps` for the target
(`--python-version`, `--platform`, `--implementation cp`); a package published only as
an sdist (deepspeed, antlr4-python3-runtime) is downloaded as one and built into a wheel
here with `pip wheel --no-deps --no-build-isolation` (both are pure Python: the wheel is
py3-none-any; DeepSpeed compiles its ops at first use on the target). Dependencies are
followed from each wheel's METADATA (Requires-Dist, markers evaluated for the target).

Skipped, with everything only they need: the names in `--skip` (default SKIP: what a
CUDA image carries, built against its CUDA; fnmatch patterns allowed), and with
`--have FILE` (`pip list --format=freeze` of the target image) every requirement an
installed version there satisfies. A pin the image does not satisfy (transformers
5.24.0 against an image's 5.17) is downloaded. Writes DIR/requirements.txt (what was
downloaded, pinned) and DIR/skipped.txt."""
from __future__ import annotations

import argparse
import configparser
import fnmatch
import os
import platform
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# what a CUDA PyTorch image carries (the image's torch was built against its CUDA; numpy,
# scipy, pandas, matplotlib came with it on the node the bundle was first made for)
SKIP = ("torch", "numpy", "scipy", "pandas", "matplotlib", "triton", "nvidia-*")


def pins(setup_cfg: Path = ROOT / "setup.cfg") -> list[Requirement]:
    cp = configparser.ConfigParser()
    cp.read(setup_cfg)
    lines = cp["options"]["install_requires"].splitlines()
    return [Requirement(x.split("#")[0].strip()) for x in lines if x.split("#")[0].strip()]


def build_requires(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """[build-system] requires: installing the project offline (--no-build-isolation)
    needs its build backend in the target environment."""
    text = pyproject.read_text()
    block = re.search(r"\[build-system\][^\[]*?requires\s*=\s*\[(.*?)\]", text, re.S)
    return [Requirement(r) for r in re.findall(r'"([^"]+)"', block.group(1))] if block else []


def host_platform() -> str:
    """This machine's manylinux tag (glibc version), e.g. manylinux_2_28_x86_64."""
    libc = os.confstr("CS_GNU_LIBC_VERSION") or "glibc 2.17"
    major, minor = libc.split()[1].split(".")[:2]
    return f"manylinux_{major}_{minor}_{platform.machine()}"


def platform_tags(plat: str) -> list[str]:
    """`plat` and the older manylinux tags a machine of that glibc also runs: pip's
    --platform takes each tag literally (a manylinux_2_28 request does not match the
    common manylinux_2_17 / manylinux2014 wheels), so all of them are passed."""
    if not plat.startswith("manylinux_2_"):
        return [plat]
    minor, arch = plat[len("manylinux_2_"):].split("_", 1)
    tags = [f"manylinux_2_{m}_{arch}" for m in range(int(minor), 4, -1)]
    return tags + [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]


def marker_env(python_version: str, plat: str) -> dict:
    """PEP 508 marker values of the target interpreter (CPython on Linux)."""
    machine = plat.split("_", 3)[-1] if plat.startswith("manylinux_") else "x86_64"
    return {"python_version": ".".join(python_version.split(".")[:2]),
            "python_full_version": python_version if python_version.count(".") == 2
            else python_version + ".0",
            "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "platform_machine": machine, "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "platform_release": "",
            "platform_version": "", "implementation_version": python_version}


def read_have(path) -> dict[str, Version]:
    have = {}
    for line in Path(path).read_text().splitlines() if path else []:
        if "==" in line and not line.startswith("#"):
            name, ver = line.split("==", 1)
            have[canonicalize_name(name)] = Version(ver.strip())
    return have


def skipped(req: Requirement, skip: tuple, have: dict) -> bool:
    name = canonicalize_name(req.name)
    if any(fnmatch.fnmatch(name, canonicalize_name(p).replace("-*", "*")) or
           fnmatch.fnmatch(name, p) for p in skip):
        return True
    return name in have and req.specifier.contains(have[name], prereleases=True)


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check",
                           "-q"], capture_output=True, text=True)


def fetch(req: Requirement, out: Path, pyver: str, plat: str) -> Path:
    """The wheel of `req` for the target in `out` (built from its sdist if it has no
    wheel); returns its path."""
    before = set(out.glob("*.whl"))
    spec = f"{req.name}{req.specifier}"
    tags = [x for t in platform_tags(plat) for x in ("--platform", t)]
    r = pip("download", "--only-binary=:all:", "--no-deps", "--python-version", pyver,
            *tags, "--implementation", "cp", "-d", str(out), spec)
    if r.returncode != 0:
        with tempfile.TemporaryDirectory() as tmp:
            r = pip("download", "--no-binary=:all:", "--no-deps", "-d", tmp, spec)
            if r.returncode == 0:
                sdist = next(Path(tmp).iterdir())
                r = pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(out),
                        str(sdist))
    if r.returncode != 0:
        raise RuntimeError(f"no wheel of {spec} for Python {pyver} {plat}:\n{r.stderr}")
    new = set(out.glob("*.whl")) - before
    name = canonicalize_name(req.name)
    found = [p for p in (new or out.glob("*.whl"))
             if parse_wheel_filename(p.name)[0] == name]
    return found[0]


def requires(wheel: Path, extras: set, env: dict) -> list[Requirement]:
    """Requires-Dist of a wheel whose markers hold for the target (and `extras`)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e})
                                     for e in extras | {""}):
            out.append(req)
    return out


def collect(reqs, out: Path, pyver: str, plat: str, skip: tuple, have: dict):
    """Download `reqs` and their dependencies; returns ({name: wheel}, skipped names)."""
    env, got, skips = marker_env(pyver, plat), {}, set()
    queue = list(reqs)
    while queue:
        req = queue.pop(0)
        name = canonicalize_name(req.name)
        if skipped(req, skip, have):
            skips.add(name)
            continue
        if name in got:
            version = parse_wheel_filename(got[name].name)[1]
            if not req.specifier.contains(version, prereleases=True):
                raise RuntimeError(f"{req} conflicts with the {got[name].name} already chosen")
            continue
        got[name] = fetch(req, out, pyver, plat)
        print(f"  {got[name].name}", flush=True)
        queue += requires(got[name], set(req.extras), env)
    return got, skips


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--python-version", default="%d.%d" % sys.version_info[:2])
    ap.add_argument("--platform", default=host_platform())
    ap.add_argument("--skip", default=" ".join(SKIP),
                    help="space-separated names / fnmatch patterns (default: %(default)s)")
    ap.add_argument("--have", default=None, help="pip list --format=freeze of the target")
    ap.add_argument("--setup-cfg", type=Path, default=ROOT / "setup.cfg")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    print(f"offline_wheels: Python {a.python_version}, {a.platform} -> {a.out}")
    got, skips = collect(pins(a.setup_cfg) + build_requires(), a.out, a.python_version, a.platform,
                         tuple(a.skip.split()), read_have(a.have))
    (a.out / "requirements.txt").write_text("".join(
        f"{n}=={parse_wheel_filename(w.name)[1]}\n" for n, w in sorted(got.items())))
    (a.out / "skipped.txt").write_text("".join(f"{n}\n" for n in sorted(skips)))
    size = sum(w.stat().st_size for w in got.values())
    print(f"offline_wheels: {len(got)} wheels, {size / 2**20:.1f} MiB; skipped "
          f"{', '.join(sorted(skips)) or 'none'}")
    return a.out


if __name__ == "__main__":
    main()
