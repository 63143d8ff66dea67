"""Build hook for the optional C scanner (traceview/ingest/_scan.c) and replay kernel (traceview/analyses/_replay.c); all metadata lives in pyproject.toml.

`optional=True`: without a compiler the install still succeeds and traceview uses its pure-Python
(msgspec) loader.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("traceview.ingest._scan", ["traceview/ingest/_scan.c"], extra_compile_args=["-O3"],
                             optional=True),
                   Extension("traceview.analyses._replay", ["traceview/analyses/_replay.c"],
                             extra_compile_args=["-O3"], optional=True)])
