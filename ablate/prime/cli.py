"""`python -m ablate.prime FILE.toml [overrides] [--cfg job] [--write PATH]`.

The file is converted and checked whole (convert.py) before anything else; the overrides
after it win over what the file says (a group given there, `env=synthetic`, replaces the
file's whole group: its `env.*` keys are dropped too). Then `python -m ablate` runs the
cell with the file's overrides followed by the command line's, so its own preflight,
`--cfg job` and `-m` work as usual. Mistakes: one line, exit status 2.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from ablate.apps.cli import main as ablate_main
from ablate.prime import resolve
from ablate.prime.convert import Conversion, Override, convert
from ablate.prime.source import PrimeError

USAGE = ("usage: python -m ablate.prime FILE.toml [key=value ...] [--cfg job] "
         "[--write conf/experiment/<NAME>.yaml]")
PRINT_ONLY = ("--cfg", "-c", "--help", "-h", "--info", "-i", "--resolve")


def parse_args(args: list[str]) -> tuple[str, str | None, list[str]]:
    """(file, --write path or None, the rest: overrides and Hydra flags)."""
    if not args or args[0].startswith("-") or not args[0].endswith(".toml"):
        raise PrimeError("ablate.prime", "", USAGE)
    rest, write = args[1:], None
    if "--write" in rest:
        i = rest.index("--write")
        if i + 1 >= len(rest) or not rest[i + 1].endswith((".yaml", ".yml")):
            raise PrimeError("--write", "", "needs a path ending .yaml "
                             "(conf/experiment/<NAME>.yaml)")
        write, rest = rest[i + 1], rest[:i] + rest[i + 2:]
    return args[0], write, rest


def user_keys(rest: list[str]) -> set[str]:
    return {a.split("=", 1)[0].lstrip("+~") for a in rest
            if "=" in a and not a.startswith("-")}


def kept(overrides: list[Override], users: set[str]) -> list[Override]:
    """The file's overrides the command line does not replace: its own keys, and the
    keys of a group the file selects (env=enronhop) that the command line selects too."""
    groups = users & {o.key.lstrip("~") for o in overrides if "." not in o.key}

    def replaced(key: str) -> bool:
        bare = key.lstrip("~+")
        return bare in users or any(bare.startswith(f"{g}.") for g in groups)
    return [o for o in overrides if not replaced(o.key)]


def hydra_value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    return f"'{_quoted(str(value))}'"


def _quoted(text: str) -> str:
    """`text` inside a quoted Hydra override value: `${` escaped (a TOML string is never
    an interpolation), and the backslashes before a quote, `${` or the end doubled
    (Hydra's override grammar; other backslashes are literal)."""
    return re.sub(r"(\\*)(\$\{|'|\Z)",
                  lambda m: m.group(1) * 2 + ("\\" if m.group(2) else "") + m.group(2), text)


def _yaml_literal(value):
    """A value for the experiment YAML: `${` escaped in every string (OmegaConf would
    resolve it), lists and tables item by item."""
    if isinstance(value, str):
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
    if isinstance(value, list):
        return [_yaml_literal(v) for v in value]
    if isinstance(value, dict):
        return {k: _yaml_literal(v) for k, v in value.items()}
    return value


def as_args(overrides: list[Override]) -> list[str]:
    out = []
    for o in overrides:
        if o.key.startswith("~"):
            out.append(o.key)
        elif "." not in o.key:                        # a group option: env=enronhop
            out.append(f"{o.key}={o.value}")
        else:
            out.append(f"{o.key}={hydra_value(o.value)}")
    return out


def local_files(conv: Conversion, overrides: list[Override], strict: bool) -> list[str]:
    """Each `hf://` value replaced by its copy in the local Hugging Face cache; one
    missing: an error (strict) or left as it is (its key returned)."""
    missing = []
    for o in overrides:
        if not (isinstance(o.value, str) and o.value.startswith("hf://")):
            continue
        local = resolve.hf_local(o.value)
        if local:
            o.value = local
        elif strict:
            name = o.value.rsplit("/", 1)[-1]
            raise PrimeError(conv.source.where(o.origin), o.origin or o.key,
                             f"{o.value} is not in the local Hugging Face cache (nothing is "
                             f"downloaded): fetch it (huggingface-cli download) or give a "
                             f"local path after the file: {o.key}=/path/to/{name}")
        else:
            missing.append(o.key)
    return missing


# ------------------------------------------------------------------ --write
# The groups whose keys a group choice owns: `env=synthetic` after the file drops the
# file's env.* keys (kept); so must it after `+experiment=NAME`. Hydra replaces a group's
# whole option, never keys merged beside it, so --write puts a group's keys in an option
# of that group, <config dir>/<group>/prime/NAME.yaml, which the experiment selects.
GROUPS = ("env", "model")


def group_options(overrides: list[Override], name: str
                  ) -> tuple[list[Override], dict[str, tuple[object, list[Override]]]]:
    """(the experiment's overrides, {group: (the option it extends or None, its keys)})
    for each group the overrides select and set keys in."""
    chosen = {o.key.lstrip("~"): o.value for o in overrides
              if "." not in o.key and o.key.lstrip("~") in GROUPS}
    owned = {g: [o for o in overrides if o.key.startswith(g + ".")] for g in chosen}
    owned = {g: keys for g, keys in owned.items() if keys}
    mine = [o for o in overrides if o.key.lstrip("~").split(".")[0] not in owned]
    return (mine + [Override(g, f"prime/{name}") for g in owned],
            {g: (chosen[g], keys) for g, keys in owned.items()})


def group_option(conv: Conversion, group: str, base, keys: list[Override], name: str) -> str:
    """The group's option: the option the file chose (none for `~model`), its keys."""
    body: dict = {"defaults": [f"/{group}/{base}@_here_", "_self_"]} if base else {}
    for o in keys:
        _nest(body, o.key.split(".")[1:], o.value)
    return (f"# The {group} of experiment {name}, converted from {conv.source.path} by "
            f"python -m ablate.prime\n# (docs/prime.md): {group}=OTHER after "
            f"+experiment={name} replaces it whole.\n" + yaml.safe_dump(body, sort_keys=False))


def experiment(conv: Conversion, overrides: list[Override], name: str) -> str:
    """The overrides as a conf/experiment yaml (`+experiment=NAME`)."""
    defaults, body = [], {"experiment": name}
    for o in overrides:
        if o.key.startswith("~"):
            defaults.append({f"override /{o.key[1:]}": None})
        elif "." not in o.key:
            defaults.append({f"override /{o.key}": o.value})
        else:
            _nest(body, o.key.split("."), o.value)
    head = (f"# @package _global_\n# Converted from {conv.source.path} ({conv.format} format"
            f"{'' if conv.format == 'lab' else ', era ' + conv.era}) by python -m "
            f"ablate.prime; the mapping: docs/prime.md.\n#   python -m ablate "
            f"+experiment={name}\n")
    if defaults:
        body = {"experiment": name, "defaults": defaults,
                **{k: v for k, v in body.items() if k != "experiment"}}
    return head + yaml.safe_dump(body, sort_keys=False)


def _nest(body: dict, parts: list[str], value) -> None:
    for part in parts[:-1]:
        body = body.setdefault(part, {})
    body[parts[-1]] = value


def _user_overrides(rest: list[str]) -> list[Override]:
    out = []
    for arg in rest:
        if "=" in arg and not arg.startswith("-"):
            key, value = arg.split("=", 1)
            out.append(Override(key.lstrip("+"), yaml.safe_load(value) if value else None))
    return out


def written_files(conv: Conversion, overrides: list[Override], path: str
                  ) -> dict[Path, str]:
    """{path: text}: the experiment and its groups' options beside it (a group's keys
    need the experiment in <config dir>/experiment/, where Hydra finds both)."""
    target = Path(path)
    mine, groups = group_options(overrides, target.stem)
    if groups and target.parent.name != "experiment":
        raise PrimeError("--write", "", f"the file's {' and '.join(groups)} keys are written "
                         f"as <config dir>/<group>/prime/{target.stem}.yaml beside the "
                         f"experiment: give a path <config dir>/experiment/{target.stem}.yaml"
                         " (conf/experiment/ or a --config-dir's)")
    root = target.parent.parent
    files = {root / g / "prime" / f"{target.stem}.yaml": group_option(conv, g, base, keys,
                                                                      target.stem)
             for g, (base, keys) in groups.items()}
    files[target] = experiment(conv, mine, target.stem)
    return files


def write_experiment(conv: Conversion, ours: list[Override], rest: list[str],
                     path: str) -> None:
    for key in local_files(conv, ours, strict=False):
        print(f"ablate.prime: note: {key} stays an hf:// file (not in the local Hugging "
              f"Face cache): give {key}=/local/path when you run it", file=sys.stderr)
    ours = [Override(o.key, _yaml_literal(o.value), o.origin) for o in ours]
    for target, text in written_files(conv, ours + _user_overrides(rest), path).items():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        except OSError as exc:   # read-only, a directory of that name, a file as its folder
            raise PrimeError("--write", "", f"cannot write {target} ({exc.strerror}): give "
                             "a writable path ending .yaml") from None
        run = f" (python -m ablate +experiment={target.stem})" if target == Path(path) else ""
        print(f"ablate.prime: wrote {target}{run}", file=sys.stderr)


# ------------------------------------------------------------------ main
def prepare(args: list[str]) -> tuple[Conversion, list[Override], list[str], str | None]:
    path, write, rest = parse_args(args)
    users = user_keys(rest)
    conv = convert(path, skip_groups=tuple(g for g in ("env", "model") if g in users))
    ours = kept(conv.overrides, users)
    if write is None and not any(a in PRINT_ONLY for a in rest):
        local_files(conv, ours, strict=True)
    return conv, ours, rest, write


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        conv, ours, rest, write = prepare(args)
        for note in conv.notes:
            print(f"ablate.prime: note: {note}", file=sys.stderr)
        if write:
            write_experiment(conv, ours, rest, write)
            return
    except PrimeError as exc:
        print(f"ablate.prime: error: {exc}", file=sys.stderr)
        sys.exit(2)
    ablate_main(as_args(ours) + rest)
