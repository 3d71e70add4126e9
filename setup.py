"""Packaging that pyproject.toml cannot say alone: runbooks/ ships inside the package.

Operators edit the top-level ``runbooks/`` folder; it is installed as ``bot.runbooks_data`` so an
installed bot finds its runbooks through importlib.resources (bot/settings/_parse.py) from any folder.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["bot", "bot.*"]), "bot.runbooks_data"],
    package_dir={"bot.runbooks_data": "runbooks"},
)
