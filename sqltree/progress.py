"""Progress of long work: every phase of sqltree reports here, and this module passes it on.

A *phase* is a piece of work that can take seconds (reading the source, growing, pruning,
compiling, scoring, a cross-validation); it reports a start, any number of steps (a level, a
pruning round, a fold) and an end, and, between them, a *note* after each statement that took
more than ``SLOW_STATEMENT`` seconds (a level of a large tree runs several), so that long work
is never silent for long. Each of these is an :class:`Event`, and every event goes

- to the ``logging`` module, logger ``"sqltree"``: steps, notes and ends at INFO, starts at
  DEBUG (``logging.basicConfig(level=logging.INFO)`` shows them);
- to every callback listening in the current context (:func:`listening`): the ``progress=``
  argument of ``sqltree.train``, or the display of the command line (:class:`Display`).

Phases nest: events of a phase inside another carry a greater ``depth``, and a callback
listening around a loop hears the phases of every call in it. A loop reports its own steps
through a phase of its own, as cross-validation does for its folds::

    with progress.phase("cross-validation", "10-fold cross-validation", total=10) as folds:
        for fold in range(10):
            model = sqltree.train(...)          # its phases nest inside this one
            folds.step(f"fold {fold + 1}/10: {accuracy:.1%} correct", accuracy=accuracy)
        folds.done("10 folds: 93.1% correct")

Listeners live in a ``contextvars`` variable, so threads (each starts with no listener) and
asyncio tasks each report to their own.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import IO, Any

logger = logging.getLogger("sqltree")

START, STEP, END, NOTE = "start", "step", "end", "note"

SLOW_STATEMENT = 2.0
"""Seconds from which a statement gets a note of its own: a short run, and every step of it
that is short, report as before; a level of a million rows, its long statements."""


@dataclass(frozen=True)
class Event:
    """One report of a phase.

    Attributes
    ----------
    phase : str
        ``"read"``, ``"grow"``, ``"prune"``, ``"compile"``, ``"score"``, or a caller's own
        (``"cross-validation"``).
    kind : {"start", "step", "end", "note"}
        A note reports work inside a step (a statement that took long); it counts no step.
    message : str
        One line for a person: ``level 3: 24 nodes, 81,234 rows, 18 split, 0.42 s``.
    step : int
        Steps reported so far in this phase (the step's own number for a ``"step"``; for a
        ``"note"``, the steps done before it).
    total : int, optional
        Steps the phase expects, when it knows (folds do; tree levels do not).
    seconds : float
        Time since the phase started.
    depth : int
        How many phases enclose this one (0 for an outermost phase).
    failed : bool
        For an ``"end"``: the phase ended with an exception (or a Ctrl-C).
    details : mapping
        The numbers in the message, by name (``nodes``, ``rows``, ``queries``, ...).
    """

    phase: str
    kind: str
    message: str
    step: int = 0
    total: int | None = None
    seconds: float = 0.0
    depth: int = 0
    failed: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)


Callback = Callable[[Event], None]

_listeners: ContextVar[tuple[Callback, ...]] = ContextVar("sqltree_listeners", default=())
_open: ContextVar[tuple[Phase, ...]] = ContextVar("sqltree_phases", default=())


@contextmanager
def listening(callback: Callback) -> Iterator[None]:
    """Send every event of the enclosed work to ``callback``, as well as to outer listeners.

    An exception the callback raises stops the work (``sqltree.train`` cleans up and lets
    it through): a callback can cancel a long run.
    """
    token = _listeners.set((*_listeners.get(), callback))
    try:
        yield
    finally:
        _listeners.reset(token)


def listeners() -> tuple[Callback, ...]:
    """The callbacks listening in the current context, outermost first."""
    return _listeners.get()


def _emit(event: Event) -> None:
    level = logging.DEBUG if event.kind == START else logging.INFO
    if logger.isEnabledFor(level):
        logger.log(level, "%s", event.message, extra={"sqltree_event": event})
    for callback in _listeners.get():
        callback(event)


class Phase:
    """A phase being reported: ``step`` for each unit of work, ``done`` for the last line."""

    def __init__(self, name: str, total: int | None, depth: int) -> None:
        self.name = name
        self.total = total
        self.depth = depth
        self.steps = 0
        self.started = time.perf_counter()
        self.summary: str | None = None
        self.details: dict[str, Any] = {}

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def step(self, message: str, **details: Any) -> None:
        """Report one unit of work done (a level, a round, a fold)."""
        self.steps += 1
        _emit(Event(self.name, STEP, message, self.steps, self.total, self.seconds,
                    self.depth, details=details))

    def done(self, message: str, **details: Any) -> None:
        """Set the line the end event carries (default: the phase's name and its seconds)."""
        self.summary = message
        self.details = details


@contextmanager
def phase(name: str, message: str, *, total: int | None = None, **details: Any) -> Iterator[Phase]:
    """Report the enclosed block as a phase: a start event now, an end event when it ends.

    ``message`` says what starts (``growing a C4.5 tree on 1,000,000 rows``). The end event
    carries what the block passed to ``Phase.done``, or ``<name> took 1.23 s``; when the block
    raises, the end event has ``failed=True`` and the exception goes on.
    """
    stack = _open.get()
    current = Phase(name, total, len(stack))
    token = _open.set((*stack, current))
    try:
        _emit(Event(name, START, message, 0, total, 0.0, current.depth, details=details))
        try:
            yield current
        except BaseException:
            # The error that stopped the phase goes on, whatever a listener does with its end.
            with contextlib.suppress(Exception):
                _emit(Event(name, END, f"{name} stopped after {current.seconds:.2f} s",
                            current.steps, total, current.seconds, current.depth, failed=True))
            raise
        summary = current.summary or f"{name} took {current.seconds:.2f} s"
        _emit(Event(name, END, summary, current.steps, total, current.seconds, current.depth,
                    details=current.details))
    finally:
        _open.reset(token)


def step(name: str, message: str, **details: Any) -> None:
    """Report a step of the innermost open phase called ``name`` (or, when none is open, a
    step of its own: growth reports its levels whoever called it)."""
    for current in reversed(_open.get()):
        if current.name == name:
            current.step(message, **details)
            return
    _emit(Event(name, STEP, message, 0, None, 0.0, len(_open.get()), details=details))


def statement(seconds: float, what: str) -> None:
    """Note a statement (or a long walk in Python) of the innermost open phase that took
    ``seconds`` (``what`` it did: ``stored level_12``), if that is more than
    ``SLOW_STATEMENT``; nothing outside a phase. The line is indented under the step under
    way (a level, a round), which reports after."""
    stack = _open.get()
    if seconds <= SLOW_STATEMENT or not stack:
        return
    current = stack[-1]
    _emit(Event(current.name, NOTE, f"  {current.name}: {what}, {seconds:.2f} s",
                current.steps, current.total, current.seconds, current.depth,
                details={"seconds": seconds, "statement": what}))


# -- the display -------------------------------------------------------------------------------
class Display:
    """Show events to a person: a live display on a terminal, a plain line per step otherwise.

    On a terminal (``rich``), every step and end is printed as a line and each open phase
    keeps a live line below them with a spinner (or a bar, when it knows its total) and its
    elapsed time, gone when the phase ends. Elsewhere (a pipe, a file, a CI log) each step and
    end is one plain line, and starts are not shown. The end of a phase that failed is not
    shown either: the error that ended it says more.

    Parameters
    ----------
    stream : file, default: standard error
    console : rich.console.Console, optional
        Where the live display draws (tests pass one that records); default: one on ``stream``.
    """

    def __init__(self, stream: IO[str] | None = None, console: Any = None) -> None:
        self.stream = stream
        self._console = console
        self._live: Any = None
        self._tasks: list[Any] = []

    def _terminal(self) -> Any:
        """The rich console to draw on, or None to write plain lines."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream or sys.stderr, highlight=False)
        return self._console if self._console.is_terminal else None

    def __call__(self, event: Event) -> None:
        console = self._terminal()
        if console is None:
            # A failed phase's end is left out: the error that ended it says more.
            if event.kind != START and not event.failed:
                stream = self.stream or sys.stderr
                stream.write("  " * event.depth + event.message + "\n")
                stream.flush()
            return
        self._draw(console, event)

    def _draw(self, console: Any, event: Event) -> None:
        from rich.markup import escape

        indent = "  " * event.depth
        if event.kind == START:
            if self._live is None:
                self._live = _live_progress(console)
                self._live.start()
            room = console.width - LIVE_COLUMNS
            task = self._live.add_task(escape(fit(indent + event.message, room)),
                                       total=event.total)
            self._tasks.append(task)
            return
        if self._live is None:  # a step with no phase of its own
            console.print(escape(indent + event.message))
            return
        if not event.failed:
            self._live.console.print(escape(indent + event.message))
        if event.kind == NOTE:
            return
        if event.kind == STEP:
            if self._tasks:
                self._live.advance(self._tasks[-1])
            return
        if self._tasks:
            self._live.remove_task(self._tasks.pop())
        if not self._tasks:
            self._live.stop()
            self._live = None


LIVE_COLUMNS = 42
"""Width the live line's other columns take: spinner, bar (24), count, elapsed time and the
spaces between them."""


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters at a word's end, marked with an ellipsis: first
    without its closing parenthesis (``growing ... rows (memory plan: ...)``), else at the
    last space that fits."""
    if len(text) <= width:
        return text
    head = text.split(" (", 1)[0]
    if head != text and len(head) + 2 <= width:
        return head + " …"
    cut = text.rfind(" ", 0, max(width - 1, 1))
    return (text[:cut] if cut > 0 else text[:max(width - 1, 1)]) + "…"


def _live_progress(console: Any) -> Any:
    """A rich Progress: spinner, what runs, a bar and a count for a phase that knows its
    total (folds), the elapsed time."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class Bar(BarColumn):
        def render(self, task: Any) -> Any:
            return Text("") if task.total is None else super().render(task)

    class Count(TextColumn):
        def render(self, task: Any) -> Any:
            return Text("" if task.total is None else f"{task.completed:.0f}/{task.total:.0f}")

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        Bar(bar_width=24),
        Count(""),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def displaying() -> bool:
    """Whether a :class:`Display` already listens in the current context."""
    return any(isinstance(c, Display) for c in _listeners.get())


@contextmanager
def shown(stream: IO[str] | None = None) -> Iterator[None]:
    """Show the progress of the enclosed work as the command line does (see :class:`Display`);
    nothing more when a display already listens.

    Examples
    --------
    >>> with sqltree.progress.shown():                 # doctest: +SKIP
    ...     scored = model.predict("big.parquet")
    """
    if displaying():
        yield
        return
    with listening(Display(stream)):
        yield


def as_listener(progress: bool | Callback | None) -> Callback | None:
    """The listener a ``progress=`` argument asks for: True is the command line's display
    (unless one already listens), a callable is itself, False or None nothing."""
    if progress is True:
        return None if displaying() else Display()
    if progress is False or progress is None:
        return None
    if not callable(progress):
        from .errors import OptionError

        raise OptionError(f"progress must be True, False or a callable, not {progress!r}")
    return progress


@contextmanager
def reporting_to(progress: bool | Callback | None) -> Iterator[None]:
    """Listen with what a ``progress=`` argument asks for during the enclosed block."""
    listener = as_listener(progress)
    if listener is None:
        yield
        return
    with listening(listener):
        yield


def count(n: int, word: str, words: str | None = None) -> str:
    """``1 node``, ``2,085 nodes``; ``words`` where the plural is not ``word + "s"``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {words or word + 's'}"


def rows(n: float) -> str:
    """``1,000,000`` for a whole number, ``12.5`` otherwise: weights read as row counts."""
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"
