"""env=openenv without openenv-core: one line with the install command, before any work
(a shadow package stands in for a missing one, so this runs in every environment)."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_without_the_package_one_line_with_the_install_command(tmp_path):
    shadow = tmp_path / "shadow" / "openenv"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('simulated: not installed')\n")
    env = dict(os.environ, WANDB_MODE="disabled",
               PYTHONPATH=f"{shadow.parent}{os.pathsep}{REPO}")
    proc = subprocess.run([sys.executable, "-m", "ablate", "env=openenv",
                           "env.url=http://127.0.0.1:9", f"hydra.run.dir={tmp_path / 'cell'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "ablate: error: env=openenv needs the openenv-core package: pip install "
        "'ablate[openenv]' (or: pip install openenv-core==0.3.0)")
    assert not (tmp_path / "cell").exists()
