"""The one compiled part: ``shared.records._speedups`` (the record decoder's and encoder's C fast paths).

Everything else about the package is in ``pyproject.toml``. The extension is optional: where no C
compiler is found the install still succeeds and the pure-Python code is used
(``shared.records.decoder.COMPILED`` tells which).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("shared.records._speedups", ["shared/records/_speedups.c"], optional=True,
                             extra_compile_args=["-O2"])])
