"""Storage backends behind one small interface (see :mod:`loopx.store.base`)."""


def display_url(url: str) -> str:
    """``url`` as safe to print: any password replaced by ``***``."""
    import re

    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)
