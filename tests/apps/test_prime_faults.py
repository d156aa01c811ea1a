"""`python -m ablate.prime`: the TOML reader's faults of issue 64 (items 5-8, 14 and its
minor line), each one line naming FILE:LINE and the key, exit status 2, no cell."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from ablate.prime import cli as prime_cli
from ablate.prime.cli import as_args, prepare
from ablate.prime.source import Source

ROOT = Path(__file__).resolve().parents[2]
ARTICLE = ROOT / "tests" / "data" / "prime" / "enronhop_env.toml"


def _file(tmp_path: Path, old: str, new: str, name: str = "broken.toml") -> Path:
    text = ARTICLE.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


def _refused(tmp_path, monkeypatch, capsys, path: Path, *extra: str) -> str:
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(SystemExit) as exc:
        prime_cli.main([str(path), "hydra.run.dir=cell", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1, err
    assert sorted(os.listdir(tmp_path)) == before          # no cell directory
    return err[0]


# ------------------------------------------------------------------ 5: `${` is text
def test_a_toml_string_is_never_an_interpolation(tmp_path):
    path = _file(tmp_path, 'project = "enronhop_env"', 'project = "${oc.env:HOME}"')
    _, ours, _, _ = prepare([str(path), "env=synthetic", "--cfg", "job"])
    from ablate.apps.cli import compose_config
    cfg = compose_config(as_args(ours) + ["env=synthetic"])
    assert cfg.run.wandb_project == "${oc.env:HOME}"


@pytest.mark.parametrize("text", ["${oc.env:HOME}", "a\\b", "C:\\dir\\", "it's", "\\${x}",
                                  "a$b"])
def test_strings_survive_the_override_and_the_experiment_yaml(text):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    value = prime_cli.hydra_value(text)
    parsed = OverridesParser.create().parse_override(f"run.wandb_project={value}")
    assert OmegaConf.create({"v": parsed.value()}).v == text
    written = yaml.safe_load(yaml.safe_dump({"v": prime_cli._yaml_literal(text)}))
    assert OmegaConf.create(written).v == text


def test_write_keeps_a_dollar_string_literal(tmp_path, monkeypatch):
    path = _file(tmp_path, 'project = "enronhop_env"', 'project = "${oc.env:HOME}"')
    target = tmp_path / "exp" / "dollar.yaml"
    monkeypatch.chdir(tmp_path)
    prime_cli.main([str(path), "env=synthetic", "--write", str(target)])
    exp = OmegaConf.create(yaml.safe_load(target.read_text()))
    assert exp.run.wandb_project == "${oc.env:HOME}"


# ------------------------------------------------------------------ 6: --write failures
def test_write_failures_are_one_line(tmp_path, monkeypatch, capsys):
    """A directory as the target, a file where its folder should be, a read-only
    folder (simulated: the tests may run as root, who writes anywhere)."""
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "afile").write_text("")
    targets = [tmp_path / "dir.yaml", tmp_path / "afile" / "x.yaml", tmp_path / "ro.yaml"]

    def read_only(self, *a, **kw):
        if self.name == "ro.yaml":
            raise PermissionError(13, "Permission denied")
        return Path.write_text.__wrapped__(self, *a, **kw)
    read_only.__wrapped__ = Path.write_text
    monkeypatch.setattr(Path, "write_text", read_only)
    for target in targets:
        with pytest.raises(SystemExit) as exc:
            prime_cli.main([str(ARTICLE), "env=synthetic", "--write", str(target)])
        err = capsys.readouterr().err.strip().splitlines()
        assert exc.value.code == 2
        assert err[-1].startswith(f"ablate.prime: error: --write: cannot write {target} (")
        assert err[-1].endswith("give a writable path ending .yaml")
    assert not (tmp_path / "ro.yaml").exists()


# ------------------------------------------------------------------ 7, 8: numbers
@pytest.mark.parametrize("old,new,expected", [
    ("oversampling_factor = 2.0", "oversampling_factor = inf",
     ":5: oversampling_factor: inf is not a finite number: give a number"),
    ("oversampling_factor = 2.0", "oversampling_factor = nan",
     ":5: oversampling_factor: nan is not a finite number"),
    ("oversampling_factor = 2.0", "oversampling_factor = 0.5",
     ":5: oversampling_factor: 0.5 is out of range: give a number >= 1"),
    ("oversampling_factor = 2.0", "oversampling_factor = -3.0",
     ":5: oversampling_factor: -3.0 is out of range: give a number >= 1"),
    ("oversampling_factor = 2.0", "oversampling_factor = 2.0\nlora_alpha = nan",
     ":6: lora_alpha: nan is not a finite number"),
    ("max_turns = 15,", "max_turns = -inf,",
     ":12: env[0].args.max_turns: -inf is not a finite number"),
    ("max_async_level = 4", "max_async_level = 4\nseq_len = 0",
     ":7: seq_len: 0 is out of range: give a number >= 1"),
    ("max_steps = 300", "max_steps = 99999999999999999999999",
     ":2: max_steps: 99999999999999999999999 does not fit in 64 bits"),
])
def test_a_bad_number_is_refused_with_its_line(tmp_path, monkeypatch, capsys, old, new,
                                               expected):
    path = _file(tmp_path, old, new)
    err = _refused(tmp_path, monkeypatch, capsys, path)
    assert err.startswith(f"ablate.prime: error: {path}{expected}"), err


def test_oversampling_without_async_still_turns_on_dynamic_sampling(tmp_path):
    path = _file(tmp_path, "max_async_level = 4", "max_async_level = 0")
    _, ours, _, _ = prepare([str(path), "env=synthetic", "--cfg", "job"])
    keys = {o.key: o.value for o in ours}
    assert keys["algo.dynamic_sampling.enable"] is True
    assert keys["algo.dynamic_sampling.max_batches"] == 1


def test_seq_len_is_the_episode_budget_when_given(tmp_path):
    path = _file(tmp_path, "max_async_level = 4", "max_async_level = 4\nseq_len = 8192")
    _, ours, _, _ = prepare([str(path), "env=synthetic", "--cfg", "job"])
    keys = {o.key: o.value for o in ours}
    assert keys["harness.max_tokens_per_episode"] == 8192


# ------------------------------------------------------------------ 14 and the minor line
def test_an_empty_file_says_so(tmp_path, monkeypatch, capsys):
    path = tmp_path / "empty.toml"
    path.write_text("# nothing yet\n")
    err = _refused(tmp_path, monkeypatch, capsys, path)
    assert err.startswith(f"ablate.prime: error: {path}:1: the file sets no keys")
    assert "unknown key" not in err


def test_an_empty_table_sets_nothing(tmp_path):
    path = _file(tmp_path, "[infrastructure]", "[wandb.extra]\n[infrastructure]")
    with pytest.raises(Exception, match="unknown key"):    # not a table of the schema
        prepare([str(path), "env=synthetic", "--cfg", "job"])
    text = ARTICLE.read_text().replace('[wandb]\nentity = "xxx-xxx"\nproject = "enronhop_env"',
                                       "[wandb]")
    assert text != ARTICLE.read_text()
    empty = tmp_path / "empty_wandb.toml"
    empty.write_text(text)
    _, ours, _, _ = prepare([str(empty), "env=synthetic", "--cfg", "job"])
    assert "run.wandb_project" not in {o.key for o in ours}


def test_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + ARTICLE.read_bytes())
    src = Source(path)
    assert src.data["max_steps"] == 300 and src.lines["eval.interval"] == 22


def test_a_file_that_is_not_utf8_is_one_line(tmp_path, monkeypatch, capsys):
    path = tmp_path / "latin1.toml"
    path.write_bytes(ARTICLE.read_bytes().replace(b"xxx-xxx", b"caf\xe9"))
    err = _refused(tmp_path, monkeypatch, capsys, path)
    assert err.startswith(f"ablate.prime: error: {path}: not UTF-8 text (byte ")
