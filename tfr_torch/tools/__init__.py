"""Tools built on the layers below: the command line (and, later, converters)."""
