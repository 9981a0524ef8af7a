"""The compiled row walks of the rewrite (tsmigrate/rewrite/_rowwalk.c), built with the
interpreter's own compiler flags. Optional: where no C compiler is found the install goes on and
the rewrite runs the same walks in Python."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tsmigrate.rewrite._rowwalk", ["tsmigrate/rewrite/_rowwalk.c"], optional=True)])
