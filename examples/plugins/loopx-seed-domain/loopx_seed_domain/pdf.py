"""A minimal PDF writer: pages of monospaced text, standard library only.

Enough for a one- or two-page report (PDF 1.4, the built-in Courier font, no images). Each
page is a content stream of ``Tj`` lines; the cross-reference table gets exact byte offsets,
so any PDF reader opens the file.
"""

from __future__ import annotations

LINES_PER_PAGE = 60
FONT_SIZE = 10
LEADING = 12


def _escape(text: str) -> str:
    # Courier in WinAnsi covers Latin-1; anything else becomes '?'.
    text = text.encode("latin-1", errors="replace").decode("latin-1")
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def render(lines: list[str], *, title: str = "Report") -> bytes:
    """The bytes of a PDF showing ``lines`` (wrapped at 90 columns), 60 lines a page."""
    wrapped: list[str] = []
    for line in lines:
        line = line.expandtabs(4)
        while len(line) > 90:
            wrapped.append(line[:90])
            line = "  " + line[90:]
        wrapped.append(line)
    pages = [wrapped[i:i + LINES_PER_PAGE] for i in range(0, max(len(wrapped), 1), LINES_PER_PAGE)] or [[]]

    objects: list[bytes] = []  # object n is objects[n - 1]
    font_id = 3
    page_ids = []
    objects.append(b"")  # 1: catalog, filled below
    objects.append(b"")  # 2: pages, filled below
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Courier /Encoding /WinAnsiEncoding >>")
    for page in pages:
        body = [f"BT /F1 {FONT_SIZE} Tf {LEADING} TL 50 800 Td"]
        for line in page:
            body.append(f"({_escape(line)}) Tj T*")
        body.append("ET")
        stream = "\n".join(body).encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        content_id = len(objects)
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents {content_id} 0 R"
            f" /Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode()
        )
        page_ids.append(len(objects))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    kids = " ".join(f"{i} 0 R" for i in page_ids)
    objects[1] = f"<< /Type /Pages /Kids [{kids}] /Count {len(page_ids)} >>".encode()
    info = f"<< /Title ({_escape(title)}) /Producer (loopx-seed-domain) >>".encode("latin-1")
    objects.append(info)
    info_id = len(objects)

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for n, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, info_id, xref)
    return bytes(out)
