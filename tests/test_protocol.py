"""The messages between peach and its workers, through the real framing on real sockets.

Every kind round-trips through a Unix socketpair, on both ends of the framing (the asyncio
``MessageChannel`` and the blocking ``send_message``/``receive_message``); bytes that are not
a message, or a message cut short, give a ``ProtocolError`` saying so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
import socket
import typing

import pytest

from peach_cli.runtime import protocol
from peach_cli.runtime.contract import CallResult
from peach_cli.runtime.plan import ComponentSpec, TaskSpec
from peach_cli.runtime.protocol import (
    Kind,
    Message,
    MessageChannel,
    ProtocolError,
    Result,
    kind_of,
    receive_message,
    send_message,
)

COMPONENT = ComponentSpec(
    "hello", "main", "/hello", "nb/Hello.ipynb", "def hello(): pass\n", "nb/Hello.ipynb", "hello"
)
TASK = TaskSpec(
    "retrain", "nb/T.ipynb", "def t(p): pass\n", "nb/T.ipynb", "t", line_map=((1, 2, 1),)
)

SAMPLES: list[Message] = [
    protocol.Start(COMPONENT, "/project", "hello/main#1", {"LOG_LEVEL": "info"}),
    protocol.Call(1, {"name": "Ada", "tags": ["a", "b"]}, {"n": 2}),
    protocol.OpenStream(2, {}, {"count": 3}),
    protocol.Cancel(2),
    protocol.Credit(2, 64, 4096),
    protocol.Ping(3),
    protocol.Patch(4, COMPONENT),
    protocol.CommitPatch(4, True),
    protocol.Stop(),
    protocol.ProfileStart(0.01, False),
    protocol.ProfileStop(5),
    protocol.Ready("coroutine", 4242),
    protocol.InitFailed("init() raised ValueError: x", "Traceback ..."),
    Result(1, True, {"hello": "Ada"}, False, None, None, True, "hello/main#1"),
    protocol.StreamStarted(2),
    protocol.Chunk(2, b"\x00tick\n" * 100),
    protocol.StreamEnded(2),
    protocol.StreamCutOff(2, "RuntimeError: boom"),
    protocol.StreamRefused(2, "bad_request", "missing required parameter 'q'"),
    protocol.Pong(3, False),
    protocol.ReinitState(False, "re-init after drift failed"),
    protocol.Log("info", "hello\nworld"),
    protocol.PatchReady(4, "function"),
    protocol.PatchFailed(4, "SyntaxError: invalid syntax", "Traceback ..."),
    protocol.ProfileData(5, {"samples": 2, "stacks": [[["notebooks/H.ipynb", 3, "hot"]], 2]}),
    protocol.RunTask(TASK, "/project", '{"a": 1}', "retrain#1", {"S3_SECRET": "x"}),
    protocol.TaskReturned("{'a': 1}", 0.25),
    protocol.TaskFailed("RuntimeError: bad data", "Traceback ... cell 4, line 3 ..."),
]


def test_every_kind_has_one_message_class_and_a_sample_here() -> None:
    assert sorted(kind_of(m) for m in SAMPLES) == sorted(Kind)
    assert set(typing.get_args(Message)) == {type(m) for m in SAMPLES}


def test_every_message_round_trips_over_a_blocking_socketpair() -> None:
    left, right = socket.socketpair()
    with left, right:
        for sent in SAMPLES:
            send_message(left, sent)
            received = receive_message(right)
            assert type(received) is type(sent)
            assert received == sent


def test_every_message_round_trips_into_the_asyncio_channel_split_anyhow() -> None:
    """The stream arrives in pieces of any size: one byte, or several messages at once."""

    async def main() -> list[Message]:
        left, right = socket.socketpair()
        received: list[Message] = []
        lost = asyncio.get_running_loop().create_future()
        channel = MessageChannel(received.append, lost.set_result)
        await asyncio.get_running_loop().create_connection(lambda: channel, sock=right)
        wire = b"".join(protocol.encode(m) for m in SAMPLES)
        with left:
            left.sendall(wire[:1])
            left.sendall(wire[1:7])
            left.sendall(wire[7:])
            # and back the other way: the channel writes what send_message's peer reads
            assert channel.send(SAMPLES[1])
            left.settimeout(10)
            assert receive_message(left) == SAMPLES[1]
        assert await asyncio.wait_for(lost, 10) is None  # closed cleanly, between messages
        assert not channel.send(SAMPLES[1])  # gone: nothing written, no error
        return received

    received = asyncio.run(main())
    assert received == SAMPLES
    assert [type(m) for m in received] == [type(m) for m in SAMPLES]


def test_a_write_to_a_peer_gone_before_its_close_was_seen_is_not_sent() -> None:
    """The other process died, and the loop has not yet read its end closing: the write
    fails at once, and ``send`` says so (peach dev then waits for the restart instead of
    counting the call as one the replica was killed in)."""

    async def main() -> tuple[bool, bool]:
        left, right = socket.socketpair()
        lost = asyncio.get_running_loop().create_future()
        channel = MessageChannel(lambda message: None, lost.set_result)
        await asyncio.get_running_loop().create_connection(lambda: channel, sock=right)
        left.close()  # no await between the close and the send: the EOF is not read yet
        sent = channel.send(SAMPLES[1])
        await asyncio.wait_for(lost, 10)
        return sent, channel.send(SAMPLES[1])

    assert asyncio.run(main()) == (False, False)


def test_a_result_carries_every_field_of_the_call_result() -> None:
    fields = [f.name for f in dataclasses.fields(CallResult)]
    assert list(Result._fields) == ["request_id", *fields]
    answer = CallResult(True, [1], True, "c", "m", True, "r#1")  # no field at its default
    assert Result.of(7, answer).call_result() == answer


def test_a_message_cut_short_on_a_blocking_socket_says_so() -> None:
    frame = protocol.encode(SAMPLES[1])
    left, right = socket.socketpair()
    with right:
        left.sendall(frame[:-3])
        left.close()
        with pytest.raises(ProtocolError, match=r"closed \d+ bytes into a message's \d+-byte body"):
            receive_message(right)
    left, right = socket.socketpair()
    with right:
        left.sendall(frame[:2])
        left.close()
        with pytest.raises(ProtocolError, match="closed 2 bytes into a message's length"):
            receive_message(right)
    left, right = socket.socketpair()
    with right:
        left.close()
        with pytest.raises(EOFError):  # closed between messages: the other end is done
            receive_message(right)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"this is not pickle", "frame that is not a message (UnpicklingError"),
        (pickle.dumps(("call", 1, None)), "frame that is not a message (KeyError"),
        (pickle.dumps((999, 1)), "frame that is not a message (KeyError: 999"),
        (pickle.dumps((int(Kind.CALL), 1)), "a Call message with 1 fields, not 3"),
    ],
)
def test_garbage_gives_a_clear_error_on_both_ends(body: bytes, says: str) -> None:
    framed = len(body).to_bytes(4, "big") + body
    left, right = socket.socketpair()
    with left, right:
        left.sendall(framed)
        with pytest.raises(ProtocolError, match=says.replace("(", r"\(")):
            receive_message(right)

    async def main() -> Exception | None:
        left, right = socket.socketpair()
        received: list[Message] = []
        lost = asyncio.get_running_loop().create_future()
        channel = MessageChannel(received.append, lost.set_result)
        await asyncio.get_running_loop().create_connection(lambda: channel, sock=right)
        with left:
            left.sendall(protocol.encode(protocol.Ping(1)) + framed)
            error = await asyncio.wait_for(lost, 10)  # the channel closes itself
        assert received == [protocol.Ping(1)]  # what came before is delivered
        return error

    error = asyncio.run(main())
    assert isinstance(error, ProtocolError)
    assert says.split(" (")[0] in str(error)


def test_a_message_cut_short_on_the_asyncio_channel_says_so() -> None:
    async def main() -> Exception | None:
        left, right = socket.socketpair()
        lost = asyncio.get_running_loop().create_future()
        channel = MessageChannel(lambda _: None, lost.set_result)
        await asyncio.get_running_loop().create_connection(lambda: channel, sock=right)
        with left:
            left.sendall(protocol.encode(SAMPLES[1])[:-1])
        return await asyncio.wait_for(lost, 10)

    error = asyncio.run(main())
    assert isinstance(error, ProtocolError)
    assert "the connection closed" in str(error) and "bytes into a message" in str(error)


def test_a_kind_is_registered_once() -> None:
    with pytest.raises(ValueError, match="CALL is already Call"):

        @protocol.message(Kind.CALL)
        class Again(typing.NamedTuple):
            request_id: int
