"""The package layout and the one compiled part; everything else is in pyproject.toml.

The schema's files sit at the top level of the checkout (sql/, migrations/) and are installed inside the package as
indexer.sql and indexer.migrations, so an installed wheel migrates a database (indexer.db.paths finds either place).

The load's block typer (indexer/load/typed/_typer.c) is optional: on a machine without a C compiler or Python
headers the build warns and goes on, and the load types every line in Python instead (indexer.load.typed.IMPL says
which path a process uses)."""
from setuptools import Extension, find_packages, setup

SCHEMA = {"indexer.sql": "sql", "indexer.migrations": "migrations",
          "indexer.migrations.versions": "migrations/versions"}

setup(packages=find_packages(include=["indexer", "indexer.*"]) + list(SCHEMA),
      package_dir=SCHEMA,
      ext_modules=[Extension("indexer.load.typed._typer", ["indexer/load/typed/_typer.c"], extra_compile_args=["-O2"],
                             optional=True)])
