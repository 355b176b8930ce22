"""Shared by the Hugging Face tests: the text of an exception and of every exception it was raised from."""


def chain(err):
    """The messages of an exception and its causes (datasets wraps generator errors in DatasetGenerationError)."""
    out = []
    while err is not None:
        out.append(str(err))
        err = err.__cause__ or err.__context__
    return "\n".join(out)
