"""The one compiled part: the file load's block typer (indexer/load/_typer.c). Everything else is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("indexer.load._typer", ["indexer/load/_typer.c"], extra_compile_args=["-O2"])])
