"""The one compiled part: the load's block typer (indexer/load/typed/_typer.c). Everything else is in pyproject.toml.

The extension is optional: on a machine without a C compiler or Python headers the build warns and goes on, and the
load types every line in Python instead (indexer.load.typed.native.IMPL says which path a process uses)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("indexer.load.typed._typer", ["indexer/load/typed/_typer.c"], extra_compile_args=["-O2"],
                             optional=True)])
