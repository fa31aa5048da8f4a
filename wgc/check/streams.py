"""Stream rules that need every walk: one consumer, a producer, and consumer inputs that fit the chunks."""

from __future__ import annotations

from wgc.check.context import Context, StreamInfo
from wgc.check.types import WILDCARD, Subst, unify
from wgc.diag.diagnostic import Note
from wgc.diag.sink import did_you_mean


def bind_consumers(ctx: Context) -> None:
    """Attach `walk w(...) on s` consumers to their streams; runs before walk bodies are checked."""
    for info in ctx.symbols.walks.values():
        w = info.decl
        if w.on is None:
            continue
        stream = ctx.symbols.streams.get(w.on)
        if stream is None:
            ctx.error("E008", f"walk `{w.name}` is fired by unknown stream `{w.on}`", w.on_span or w.span,
                      did_you_mean(w.on, ctx.symbols.streams))
            continue
        stream.consumer_walks.append(w)
        if len(info.args) != 1:
            ctx.error("E040", f"walk `{w.name}` is fired per chunk of `{w.on}`, so it takes exactly one input "
                      f"(the chunk, {stream.chunk}); it declares {len(info.args)}", w.span)
            continue
        _check_consumer_input(ctx, stream, w.name, info.args[0], w.args[0].span)


def _check_consumer_input(ctx: Context, stream: StreamInfo, walk: str, arg, span) -> None:
    problem = unify(stream.chunk, arg, Subst(), walk)
    if problem is not None:
        ctx.error("E040", f"walk `{walk}` takes {arg}, but stream `{stream.decl.name}` delivers {stream.chunk} "
                  f"chunks: {problem}", span)
        return
    if stream.chunk.dims and stream.chunk.dims[0] == WILDCARD and arg.dims and isinstance(arg.dims[0], int):
        rule = stream.decl.at_end or "flush"
        why = ("the first chunk has no left context" if stream.decl.policy.name == "left_context"
               else f"`at_end {rule}` delivers the final fragment as it is")
        helps = [f"declare the input as {stream.chunk}"]
        if stream.decl.policy.name != "left_context":
            helps.append("or end the stream with `at_end pad` or `at_end drop`")
        ctx.error("E034", f"walk `{walk}` needs exactly {arg.dims[0]} items per chunk, but chunks of "
                  f"`{stream.decl.name}` vary in length: {why}", span, tuple(helps))


def check_endpoints(ctx: Context) -> None:
    for info in ctx.symbols.streams.values():
        s = info.decl
        if not info.producers:
            ctx.error("E020", f"nothing sends to stream `{s.name}`", s.span, (f"add `send VALUE -> {s.name}` in a walk",))
        walks = [w.span for w in info.consumer_walks]
        if not walks and not info.recvs:
            ctx.error("E021", f"nothing reads stream `{s.name}`", s.span,
                      (f"fire a walk per chunk: `walk NAME(chunk: {info.chunk}) on {s.name}`, or `recv {s.name}` in a loop",))
        elif len(walks) > 1:
            ctx.error("E040", f"stream `{s.name}` fires {len(walks)} walks; a stream fires at most one",
                      walks[1], notes=(Note("first consumer walk", walks[0]),))
        elif walks and info.recvs:
            # Several `recv` sites may share a stream (one reader reading in several walks), but a
            # stream that fires a walk per chunk has no chunks left for anyone else.
            ctx.error("E040", f"stream `{s.name}` fires a walk per chunk and is also read with `recv`",
                      info.recvs[0], notes=(Note("consumer walk", walks[0]),))
