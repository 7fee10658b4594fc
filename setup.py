"""Thin shim: all package metadata lives in pyproject.toml (nbdev 3 reads its settings from [tool.nbdev])."""
from setuptools import setup

setup()
