"""Metadata lives in setup.cfg. This hook only ships conf/ (which sits beside the package
in the repository, see README.md "Layout") inside built wheels as ablate/conf, where ablate.apps.cli looks
when no checkout is around."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithConf(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads conf/ from the checkout
        src = Path(__file__).resolve().parent / "conf"
        dst = Path(self.build_lib) / "ablate" / "conf"
        for path in sorted(src.rglob("*.yaml")):
            target = dst / path.relative_to(src)
            self.mkpath(str(target.parent))
            self.copy_file(str(path), str(target))


setup(cmdclass={"build_py": BuildPyWithConf})
