"""Server arguments, IPC names, and their hand-off to child processes.

The main process writes :class:`ServerArgs` and :class:`PortArgs` as JSON into a
shared-memory segment named ``mtok_args_<pid>`` before any child starts; each
child reads it back by name.  JSON rather than pickle: the segment is a file
under /dev/shm, and nothing read from a file should be able to run code.

Where shared memory is unavailable (no /dev/shm, or ``MTOK_SHM_DIR`` names a
directory that does not exist) the same JSON travels to each child over the
process-start pipe instead (:func:`args_ref`), and segments whose name is a
path are files mapped with mmap (``mtok.wire.filemem``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import re
import struct
import sys
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from .. import flags
from ..flags import API_KEY_ENV
from ..procutil import pid_alive
from .filemem import FileSegment, is_file_segment
from .ipc import ipc_name

if TYPE_CHECKING:
    from ..models import ModelSpec

logger = logging.getLogger(__name__)

SHM_PREFIX = "mtok_"
SHM_DIR_ENV = "MTOK_SHM_DIR"  # where POSIX shared memory lives; a missing directory turns it off


class ServerArgsMethods:
    """What :class:`ServerArgs` does with its fields; the fields come from :data:`mtok.flags.SETTINGS`."""

    @property
    def model_name(self) -> str:
        if self.served_model_name:
            return self.served_model_name
        if self.tokenizer_path:
            path = self.tokenizer_path.rstrip("/")
            base = os.path.basename(path)
            if base == "tokenizer.json":
                base = os.path.basename(os.path.dirname(os.path.abspath(path)))
            elif base.endswith(".json"):
                base = base[: -len(".json")]
            return base or "default"
        return "mtok-default"

    def model_specs(self) -> "List[ModelSpec]":
        from ..models import ModelSpec

        if not self.models:
            return [ModelSpec(self.model_name, self.tokenizer_path, self.engine)]
        return [ModelSpec.parse(m, self.engine) for m in self.models]

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        flags.add_arguments(parser)

    @classmethod
    def from_cli_args(cls, ns: argparse.Namespace) -> "ServerArgs":
        names = {f.name for f in dataclasses.fields(cls)}
        args = cls(**{k: v for k, v in vars(ns).items() if k in names})
        args.api_key = resolve_api_key(args.api_key, getattr(ns, "api_key_file", None))
        return args

    def check(self) -> None:
        """Refuse settings that cannot work, with a message a user can act on."""
        problems = flags.problems(self)  # each flag on its own; what spans flags follows
        if self.models:
            if self.tokenizer_path or self.served_model_name:
                problems.append("--model replaces --tokenizer-path and --served-model-name; give one or the other")
            try:
                names = [s.name for s in self.model_specs()]
            except ValueError as e:
                problems.append(str(e))
            else:
                if len(set(names)) != len(names):
                    problems.append("--model names must be distinct")
        problems.extend(self._parser_problems())
        if not problems:
            from ..chat_templates import flag_problems

            problems.extend(flag_problems(self))
        if problems:  # model_specs() is read by several checks: say each problem once
            raise ValueError("; ".join(dict.fromkeys(problems)))

    def parsers(self) -> "Dict[str, Dict[str, str]]":
        """{"tool": {model: parser}, "reasoning": {model: parser}} from the two flags."""
        from ..parsers import REASONING_FORMATS, TOOL_PARSERS, per_model

        names = [s.name for s in self.model_specs()]
        return {"tool": per_model(self.tool_call_parser, names, TOOL_PARSERS, "--tool-call-parser"),
                "reasoning": per_model(self.reasoning_parser, names, REASONING_FORMATS, "--reasoning-parser")}

    def _parser_problems(self) -> List[str]:
        try:
            self.parsers()
        except ValueError as e:
            return [str(e)]
        return []


ServerArgs = dataclasses.make_dataclass("ServerArgs", flags.dataclass_fields(), bases=(ServerArgsMethods,))
ServerArgs.__module__ = __name__
ServerArgs.__doc__ = """The server's settings: one field per carried row of :data:`mtok.flags.SETTINGS`,
with its default.  Made from the table, so a flag is declared in one place."""


def resolve_api_key(flag: Optional[str], path: Optional[str]) -> Optional[str]:
    """--api-key, else --api-key-file's first line, else $MTOK_API_KEY, else none.
    The flag is visible to every local user (``ps``); the other two are not."""
    if flag is not None and path is not None:
        raise ValueError("give --api-key or --api-key-file, not both")
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                key = f.readline().strip()
        except OSError as e:
            raise ValueError(f"--api-key-file {path}: {e.strerror or e}") from None
        if not key:
            raise ValueError(f"--api-key-file {path} is empty")
        return key
    return flag if flag is not None else (os.environ.get(API_KEY_ENV) or None)


@dataclass
class PortArgs:
    """The address of each fixed endpoint, named by the role of its reader.

    A worker's own address (``worker_address``) is made per process by the
    arbiter; messages carry it so that replies find their way back.
    """

    sock_dir: str
    scheduler_inbox: str = ""  # requests for the Scheduler (from the TokenizerManager or the router)
    detokenizer_inbox: str = ""  # the Scheduler's token-id batches
    reply_inbox: str = ""  # the detokenizer's replies: the TokenizerManager's with one worker, the router's with several
    router_inbox: str = ""  # what the N workers send on to the Scheduler
    status_name: str = ""  # the status board: a shared-memory name, or a file path

    @classmethod
    def in_dir(cls, sock_dir: str, status_name: str = "") -> "PortArgs":
        return cls(
            sock_dir=sock_dir,
            scheduler_inbox=ipc_name(sock_dir, "scheduler"),
            detokenizer_inbox=ipc_name(sock_dir, "detokenizer"),
            reply_inbox=ipc_name(sock_dir, "replies"),
            router_inbox=ipc_name(sock_dir, "router"),
            status_name=status_name or os.path.join(sock_dir, "status"),
        )


# --- shared-memory hand-off -----------------------------------------------------------
_LEN = struct.Struct("<Q")


def args_shm_name(pid: Optional[int] = None) -> str:
    return f"{SHM_PREFIX}args_{pid or os.getpid()}"


@contextlib.contextmanager
def _untracked() -> Iterator[None]:
    """Keep multiprocessing's resource tracker out of our segments (Python < 3.13).

    The tracker would unlink a segment when the first process that attached it
    exits, and complain about the ones it did not see created.  mtok unlinks
    its own segments, and removes those of a killed server at the next start.
    """
    if sys.version_info >= (3, 13):
        yield
        return
    from multiprocessing import resource_tracker

    saved = resource_tracker.register, resource_tracker.unregister
    resource_tracker.register = resource_tracker.unregister = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        resource_tracker.register, resource_tracker.unregister = saved  # type: ignore[assignment]


def shared_memory_usable() -> bool:
    """Whether POSIX shared memory works here: ``MTOK_SHM_DIR`` (default
    /dev/shm) must be a directory, and a small probe segment must open."""
    shm_dir = os.environ.get(SHM_DIR_ENV)
    if shm_dir is not None and not os.path.isdir(shm_dir):
        return False
    try:
        unlink_shm(create_shm(f"{SHM_PREFIX}probe_{os.getpid()}", 8))
    except OSError:
        return False
    return True


def _open(name: str, create: bool = False, size: int = 0) -> Any:
    if is_file_segment(name):
        return FileSegment(name, create, size)
    kwargs = {"track": False} if sys.version_info >= (3, 13) else {}
    with _untracked():
        return shared_memory.SharedMemory(name=name, create=create, size=size, **kwargs)


def attach_shm(name: str) -> shared_memory.SharedMemory:
    return _open(name)


def create_shm(name: str, size: int) -> shared_memory.SharedMemory:
    """A new 0600 segment (the stdlib's mode); an old one of that name is replaced."""
    try:
        unlink_shm(attach_shm(name))
    except FileNotFoundError:
        pass
    return _open(name, create=True, size=size)


def args_json(server_args: ServerArgs, port_args: PortArgs) -> str:
    return json.dumps({"server": dataclasses.asdict(server_args), "port": dataclasses.asdict(port_args)})


def write_args(name: str, server_args: ServerArgs, port_args: PortArgs) -> shared_memory.SharedMemory:
    payload = args_json(server_args, port_args).encode()
    shm = create_shm(name, _LEN.size + len(payload))
    _LEN.pack_into(shm.buf, 0, len(payload))
    shm.buf[_LEN.size : _LEN.size + len(payload)] = payload
    return shm


def read_args(ref: str) -> "tuple[ServerArgs, PortArgs]":
    """The arguments from a segment's name, or inline JSON (the no-shm fallback)."""
    if ref.startswith("{"):
        data: Dict[str, Any] = json.loads(ref)
    else:
        shm = attach_shm(ref)
        try:
            (n,) = _LEN.unpack_from(shm.buf, 0)
            data = json.loads(bytes(shm.buf[_LEN.size : _LEN.size + n]))
        finally:
            shm.close()
    return ServerArgs(**data["server"]), PortArgs(**data["port"])


def unlink_shm(shm: Optional[shared_memory.SharedMemory]) -> None:
    if shm is None:
        return
    try:
        shm.close()
    except BufferError:  # a memoryview still refers to it; the unlink below is what matters
        pass
    try:
        with _untracked():
            shm.unlink()
    except FileNotFoundError:
        pass


def remove_stale_segments(shm_dir: Optional[str] = None) -> List[str]:
    """Unlink ``mtok_*_<pid>`` segments whose server is dead (killed without cleanup)."""
    shm_dir = shm_dir or os.environ.get(SHM_DIR_ENV, "/dev/shm")
    removed = []
    pattern = re.compile(rf"^{SHM_PREFIX}[a-z]+_(\d+)$")
    try:
        entries = os.listdir(shm_dir)
    except OSError:
        return removed
    for entry in entries:
        m = pattern.match(entry)
        if m and not pid_alive(int(m.group(1))):
            try:
                os.unlink(os.path.join(shm_dir, entry))
                removed.append(entry)
            except OSError:
                pass
    return removed
