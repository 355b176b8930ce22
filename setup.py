"""Builds tfr_torch's compiled core (tfr_torch/_native/src, C99, CPython headers only).

The metadata lives in pyproject.toml; this file only declares the extension. If it cannot be compiled (no C
compiler, an unsupported platform), the build goes on and tfr_torch runs on its pure-Python backend: one line on
stderr says so. TFR_TORCH_CFLAGS / TFR_TORCH_LDFLAGS add compiler and linker flags (the sanitizer build uses them);
TFR_TORCH_REQUIRE_NATIVE=1 makes a failed compile an error (the wheel builds set it).
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCES = ["module.c", "bind_framing.c", "bind_image.c", "bind_batch.c", "bind_example.c", "bind_sequence.c",
           "bind_bytes.c", "bind_seek.c", "crc32c.c", "framing.c", "fileread.c", "example.c", "batch.c", "sequence.c",
           "spans.c", "transport.c", "seek.c", "jpeg.c", "png.c", "pixels.c"]
HEADERS = ["bindings.h", "crc32c.h", "framing.h", "fileread.h", "example.h", "batch.h", "sequence.h", "spans.h",
           "transport.h", "wire.h", "seek.h", "jpeg.h", "png.h", "pixels.h"]
ZLIB_ONLY = ("seek.c", "png.c", "bind_seek.c")  # need zlib: left out on Windows (see _zlib_macros)


class OptionalBuildExt(build_ext):
    """build_ext that falls back to the pure-Python backend instead of failing the install."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any compiler or platform failure means: no compiled core
            self._notice(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._notice(exc)

    @staticmethod
    def _notice(exc):
        if os.environ.get("TFR_TORCH_REQUIRE_NATIVE", "") not in ("", "0"):
            raise exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if len(first) > 160:  # a failed compiler command line: its start says which
            first = first[:157] + "..."
        sys.stderr.write(f"tfr_torch: the compiled core was not built ({first}); using the pure-Python backend\n")


def _compile_args():
    if os.name == "nt":
        return ["/O2"]
    args = ["-O3", "-std=gnu99", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
    return args + os.environ.get("TFR_TORCH_CFLAGS", "").split()


def _zlib_macros():
    """seek.c (seek points in GZIP / ZLIB files) and png.c (PNG sequences) link the system's zlib (zlib.h and -lz, as
    CPython's own zlib module does on POSIX); on Windows both are left out, with their binding bind_seek.c (ZLIB_ONLY):
    compressed files are read from their start, and Pillow decodes PNGs."""
    return [] if os.name == "nt" else [("TFR_HAVE_ZLIB", "1")]


def _link_args():
    return [] if os.name == "nt" else os.environ.get("TFR_TORCH_LDFLAGS", "").split()


setup(
    ext_modules=[
        Extension(
            "tfr_torch._native._core",
            sources=[f"tfr_torch/_native/src/{name}" for name in SOURCES
                     if os.name != "nt" or name not in ZLIB_ONLY],
            depends=[f"tfr_torch/_native/src/{name}" for name in HEADERS],
            extra_compile_args=_compile_args(),
            extra_link_args=_link_args(),
            define_macros=_zlib_macros(),
            libraries=[] if os.name == "nt" else ["z"],
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
