"""Build hook for the optional C scanner (traceview/_scan.c) and replay kernel (traceview/_replay.c); all metadata lives in pyproject.toml.

`optional=True`: without a compiler the install still succeeds and traceview uses its pure-Python
(msgspec) loader.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("traceview._scan", ["traceview/_scan.c"], extra_compile_args=["-O3"], optional=True),
                   Extension("traceview._replay", ["traceview/_replay.c"], extra_compile_args=["-O3"], optional=True)])
