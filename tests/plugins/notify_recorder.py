"""A test plugin: a ``loopx_notify`` hook that appends each notification to $NOTIFY_RECORDER_FILE."""

import json
import os

import loopx


@loopx.hookimpl
def loopx_notify(notification):
    with open(os.environ["NOTIFY_RECORDER_FILE"], "a") as f:
        f.write(json.dumps(notification) + "\n")
    return True
