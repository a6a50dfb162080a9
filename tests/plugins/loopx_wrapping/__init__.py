"""Test plugins that use pluggy's own hook machinery on LoopX's hooks: a ``wrapper=True`` hook, an
old-style ``hookwrapper``, and plain implementations ordered with ``tryfirst``/``trylast``.
Installed through real entry points (``tests/plugin_site.py``); ``WRAPPING_*`` variables choose
what they do, ``WRAPPING_LOG`` is a file each call appends one JSON line to."""

import json
import os

from loopx import hookimpl


def _mode(name: str) -> str:
    return os.environ.get(f"WRAPPING_{name}", "")


def _log(what: str, **data) -> None:
    path = os.environ.get("WRAPPING_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"what": what, **data}, default=repr) + "\n")


class Plain:
    """Contributes one action, and vetoes when asked to (first, ``tryfirst``)."""

    @hookimpl
    def loopx_contract_actions(self, goal):
        if _mode("PLAIN") == "raise":
            raise RuntimeError("the plain actions exploded")
        return [{"argv": ["loopx", "goal", "show", goal.id], "note": "from the plain hook"}]

    @hookimpl(tryfirst=True)
    def loopx_contract_veto(self, goal):
        _log("plain veto asked")
        if _mode("VETO") == "raise":
            raise RuntimeError("the plain veto exploded")
        if _mode("VETO") == "veto":
            return {"reason": "wrapping.first", "message": "the first veto", "actions": [["loopx", "plugins"]]}
        return None


class Late:
    """A ``trylast`` veto: asked only when no veto before it answered (``firstresult``)."""

    @hookimpl(trylast=True)
    def loopx_contract_veto(self, goal):
        _log("late veto asked")
        if _mode("VETO") in ("veto", "late"):
            return {"reason": "wrapping.late", "message": "the late veto", "actions": []}
        return None


class Wrapper:
    """New-style wrappers (``wrapper=True``): see the answer, and alter it."""

    @hookimpl(wrapper=True)
    def loopx_contract_actions(self, goal, run_id):
        if _mode("WRAPPER") == "raise-before":
            raise RuntimeError("the wrapper exploded before")
        answers = yield
        _log("wrapper saw actions", answers=answers)
        if _mode("WRAPPER") == "raise-after":
            raise RuntimeError("the wrapper exploded after")
        if _mode("WRAPPER") == "wrongtype":
            return answers + ["not a list"]
        if _mode("WRAPPER") == "notalist":
            return "not a list of answers"
        return answers + [[{"argv": ["loopx", "run", "show", run_id], "note": "added by the wrapper"}]]

    @hookimpl(wrapper=True)
    def loopx_contract_veto(self, goal):
        try:
            veto = yield
        except Exception as exc:
            _log("wrapper saw a veto fault", error=str(exc))
            if _mode("WRAPPER") == "swallow":
                return None  # tries to turn a broken veto into "go ahead"
            raise
        _log("wrapper saw veto", veto=veto)
        if veto is not None and _mode("WRAPPER") == "soften":
            return None  # a wrapper may overrule the implementations' answer
        if veto is not None:
            return {**veto, "message": veto["message"] + " (seen by the wrapper)"}
        return veto


class OldStyle:
    """An old-style ``hookwrapper``: sees the outcome object pluggy hands it, forces a result."""

    @hookimpl(hookwrapper=True)
    def loopx_contract_actions(self):
        outcome = yield
        answers = outcome.get_result()
        _log("old-style wrapper saw actions", count=len(answers))
        if _mode("OLDSTYLE") == "drop-plain":
            outcome.force_result([a for a in answers if not any(x.get("note") == "from the plain hook" for x in a)])


PLAIN, LATE, WRAPPER, OLDSTYLE = Plain(), Late(), Wrapper(), OldStyle()
