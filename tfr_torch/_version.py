__version__ = "0.1.0"
"""The version of tfr_torch (also `python -m tfr_torch --version`, which adds the backend in use)."""
