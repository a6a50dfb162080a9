"""Who the status server answers: loopback ``Host`` names without a token, else only requests
that carry the token; a request whose ``Host`` is ambiguous is refused outright."""

from __future__ import annotations

import base64
import hmac
import ipaddress
from urllib.parse import urlsplit

from loopx.status_server.responses import send_error


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    if host.lower() in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def authorised(handler) -> bool:
    """Whether to answer this request; if not, the refusal (400, 401 or 403) is already sent."""
    if not one_host(handler):
        return False
    token = handler.server.token
    if token is None:
        if not is_loopback(host_name(handler.headers.get("Host") or "")):
            send_error(handler, 403, "forbidden", "only loopback Host names are served without a token")
            return False
        return True
    given = handler.headers.get("Authorization") or ""
    scheme, _, value = given.partition(" ")
    candidate = ""
    if scheme.lower() == "bearer":
        candidate = value.strip()
    elif scheme.lower() == "basic":
        try:
            candidate = base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            candidate = ""
    if candidate and hmac.compare_digest(candidate.encode(), token.encode()):
        return True
    send_error(handler, 401, "unauthorized", "this server needs its token: Authorization: Bearer TOKEN",
               {"WWW-Authenticate": 'Bearer realm="loopx", Basic realm="loopx", charset="UTF-8"'})
    return False


def one_host(handler) -> bool:
    """Refuse (400) a request whose ``Host`` is ambiguous: two ``Host`` headers (equal or not),
    one naming several hosts, none on HTTP/1.1, or an absolute request target naming another
    host. A proxy and this server could otherwise each believe a different one."""
    hosts = handler.headers.get_all("Host") or []
    problem = None
    if len(hosts) > 1:
        problem = "more than one Host header"
    elif not hosts and handler.request_version == "HTTP/1.1":
        problem = "no Host header (HTTP/1.1 requires one)"
    elif hosts and (not hosts[0].strip() or any(c in hosts[0] for c in ", \t/@")):
        problem = "a malformed Host header"
    elif "://" in handler.path:
        target = urlsplit(handler.path).netloc.lower()
        if not hosts or target != hosts[0].strip().lower():
            problem = "a request target naming another host than the Host header"
    if problem:
        handler.close_connection = True
        send_error(handler, 400, "bad_request", f"refused: {problem}")
        return False
    return True


def host_name(header: str) -> str:
    """The name part of a ``Host`` header: ``[::1]:8765`` -> ``[::1]``, ``localhost:80`` -> ``localhost``."""
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header
