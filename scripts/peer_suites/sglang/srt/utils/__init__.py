"""Stand-in for ``sglang.srt.utils``: ``kill_process_tree`` (ends a server that
``popen_launch_server`` started) and ``is_npu``."""

import mtok_peer


def kill_process_tree(parent_pid, include_parent=True, skip_pid=None, **_ignored):
    """SIGTERM to the server's process group, then SIGKILL."""
    mtok_peer.kill(parent_pid)


def is_npu() -> bool:
    return False
