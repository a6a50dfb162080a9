"""Storage backends behind one small interface (see :mod:`loopx.store.base`)."""

import re

# user:PASSWORD@ in a URL's authority; password=VALUE in its query or in a libpq key=value
# string (quoted with '' or bare), sslpassword too. A value is cut at & / whitespace. Strings,
# compiled on first use (re's cache): only an error or a display of a URL needs them.
_USERINFO = r"(://[^:/@?#\s]*:)[^@/?#\s]*@"
_PARAM = r"(?i)((?:^|[?&\s;])(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s#;]*)"


def display_url(url: str) -> str:
    """``url`` as safe to print: any password (``user:pw@``, ``?password=``, ``password=`` in a
    libpq key=value string) replaced by ``***``."""
    return re.sub(_PARAM, r"\1***", re.sub(_USERINFO, r"\1***@", url))


def secrets_in(url: str | None) -> list[str]:
    """The password values ``url`` carries, raw and percent-decoded (longest first)."""
    if not url:
        return []
    from urllib.parse import unquote

    found = [m.group(0)[3:-1].split(":", 1)[1] for m in re.finditer(_USERINFO, url)]
    found += [m.group(2).strip("'") for m in re.finditer(_PARAM, url)]
    values = {v for f in found if f and f != "***" for v in (f, unquote(f), unquote(f.replace("+", " ")))}
    return sorted((v for v in values if len(v) >= 2), key=len, reverse=True)


def redact_text(text: str, url: str | None) -> str:
    """``text`` (a message, an exception's text) with ``url``'s passwords replaced by ``***``,
    wherever they appear, and any URL in it shown as :func:`display_url` shows it."""
    for secret in secrets_in(url):
        text = text.replace(secret, "***")
    return display_url(text)
