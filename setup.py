"""The optional compiled read path (``loadtests/client/_fastread.c``); everything else is in pyproject.toml.

``optional=True``: without a C compiler or Python's headers the install still succeeds, with a
warning, and the harness reads through its Python path (the same records, more CPU a frame).
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "loadtests/client/_fastread.c"
SOURCE_SHA = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()

setup(
    ext_modules=[
        Extension(
            "loadtests.client._fastread",
            [SOURCE],
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-strict-aliasing"],
            define_macros=[("FASTREAD_SOURCE_SHA", f'"{SOURCE_SHA}"')],
            optional=True,
        )
    ]
)
