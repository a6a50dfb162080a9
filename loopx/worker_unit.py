"""The systemd ``--user`` unit that keeps a ``loopx worker`` running (``loopx worker --print-unit``)."""

from __future__ import annotations

import os


def unit(url: str | None, concurrency: int, executor: str, grace_seconds: float, workdir: str | None = None) -> str:
    """A ``systemd --user`` unit that keeps this worker running: the installed ``loopx`` by its
    absolute path, in LoopX's own directory, its agents working in ``workdir`` (default: here)."""
    import shlex

    from loopx.sandbox import selfrun
    from loopx.ledger.registry import resolve_url

    argv = [*selfrun.console_script(), "worker", "--concurrency", str(concurrency), "--executor", executor,
            "--grace-seconds", str(grace_seconds), "--workdir", os.path.abspath(workdir or os.getcwd())]
    registry = resolve_url(url)
    if "://" not in registry:
        registry = os.path.abspath(registry)
    return "\n".join([
        "# ~/.config/systemd/user/loopx-worker.service",
        "# systemctl --user daemon-reload && systemctl --user enable --now loopx-worker",
        "# journalctl --user -u loopx-worker -f     (loginctl enable-linger $USER: keep it running logged out)",
        "[Unit]",
        "Description=LoopX worker: governed turns for every goal that should run",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"Environment={shlex.quote('LOOPX_REGISTRY=' + registry)}",
        f"ExecStart={shlex.join(argv)}",
        f"WorkingDirectory={selfrun.CWD}",
        "KillSignal=SIGTERM",
        "SuccessExitStatus=143",
        "KillMode=mixed",
        f"TimeoutStopSec={int(grace_seconds) + 30}",
        "Restart=on-failure",
        "RestartSec=5",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ])
