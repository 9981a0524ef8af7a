"""The compiled PlainBuffer walks (tsmigrate/wire/_rowwalk.c: the rewrite's row walks, stream
records), built with the interpreter's own compiler flags. Optional: where no C compiler is found
the install goes on and the same walks run in Python."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tsmigrate.wire._rowwalk", ["tsmigrate/wire/_rowwalk.c"], optional=True)])
